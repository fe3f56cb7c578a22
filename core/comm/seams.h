// Exercise seams for communication. The algorithms a student re-implements are not in core:
// core declares their signature here, solutions/ holds the reference and exercises/ the
// student's version, and the program installs one set (`--impl reference|mine`). The local
// backend calls whatever is installed, so a student's ring all-reduce drives every lesson.
#pragma once
#include <functional>
#include <string>

#include "core/comm/comm.h"

namespace mgpu::comm {

// Ring all-reduce on top of comm.send/recv (any group size, any length, sum or avg), in place.
using AllReduceFn = std::function<void(Comm& comm, Tensor& t, ReduceOp op)>;

struct CommSeams {
  std::string impl_name;  // "reference" or "mine"
  AllReduceFn all_reduce;
};

void install_comm_seams(CommSeams seams);
// The installed seams; throws std::logic_error naming the missing one if nothing was installed.
const CommSeams& comm_seams();

}  // namespace mgpu::comm
