// The graded exercise functions: the reference versions (solutions/) and the student's
// (exercises/) share one list of declarations.
#pragma once
#include "core/comm/comm.h"
#include "core/parallel/ddp_seams.h"
#include "core/tensor/tensor.h"

namespace mgpu::reference {
#include "exercises/declarations.inc"
}  // namespace mgpu::reference

namespace mgpu::mine {
#include "exercises/declarations.inc"
}  // namespace mgpu::mine
