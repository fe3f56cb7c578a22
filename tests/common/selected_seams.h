// The exercise functions as the test main selected them (the reference, or the student's under
// MGPU_IMPL=mine), in the forms tests hand to what they build: exercise 03's GPipe and 1F1B
// compute orders for make_schedule and the generators, exercise 01's all-reduce for a World.
#pragma once
#include "core/parallel/pipeline/seams.h"
#include "core/runtime/all_reduce_fn.h"
#include "exercises/selection.h"

inline const mgpu::pipeline::PipelineSeams& compute_orders() {
  return mgpu::ex::selected_seams().pipeline;
}

inline const mgpu::comm::AllReduceFn& selected_all_reduce() {
  return mgpu::ex::selected_seams().comm.all_reduce;
}
