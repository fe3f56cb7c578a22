// Exercise seams for communication. The algorithms a student re-implements are not in core:
// core declares their signature here, solutions/ holds the reference and exercises/ the
// student's version, and the program installs one set (`--impl reference|mine`). A World built
// without its own all-reduce takes the installed one (installed_all_reduce()) and hands it to
// every communicator it makes, so a student's ring all-reduce drives every lesson; no backend
// reads this table.
#pragma once
#include <functional>
#include <string>

#include "core/comm/all_reduce_fn.h"
#include "core/comm/comm.h"

namespace mgpu::comm {

struct CommSeams {
  std::string impl_name;  // "reference" or "mine"
  AllReduceFn all_reduce;
};

void install_comm_seams(CommSeams seams);
// The installed seams; throws std::logic_error naming the missing one if nothing was installed.
const CommSeams& comm_seams();
// The installed all-reduce, the default a World's communicators are made with. If none is
// installed yet, a function that looks it up when called (and raises comm_seams()'s error if
// there is still none), as before worlds took it at construction.
AllReduceFn installed_all_reduce();

}  // namespace mgpu::comm
