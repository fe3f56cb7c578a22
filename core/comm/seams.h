// Exercise seam for communication (exercise 01). The algorithm a student re-implements is not in
// core: core declares its signature here, solutions/ holds the reference and exercises/ the
// student's version, and the program hands one to every World it makes
// (WorldOptions::all_reduce), which hands it to every communicator; no backend reads this table.
#pragma once
#include <string>

#include "core/runtime/all_reduce_fn.h"

namespace mgpu::comm {

struct CommSeams {
  std::string impl_name;  // "reference" or "mine"
  AllReduceFn all_reduce;
};

}  // namespace mgpu::comm
