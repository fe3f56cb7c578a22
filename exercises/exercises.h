// The graded exercise functions: the reference versions (solutions/) and the student's
// (exercises/) share one list of declarations.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/comm/comm.h"
#include "core/comm/seams.h"
#include "core/memory/seams.h"
#include "core/model/gpt.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/ddp_seams.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/seams.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero.h"
#include "core/runtime/trace_event.h"
#include "core/tensor/tensor.h"
#include "core/trace/bubble_seams.h"
#include "exercises/types.h"

namespace mgpu::reference {
#include "exercises/declarations.inc"
}  // namespace mgpu::reference

namespace mgpu::mine {
#include "exercises/declarations.inc"
}  // namespace mgpu::mine
