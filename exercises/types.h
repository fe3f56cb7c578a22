// Types the graded exercises exchange with their callers. They live outside the two namespaces
// (mgpu::reference, mgpu::mine) so that the student's results and the reference's compare
// directly and either implementation can be handed to the same caller. The types a core seam
// carries are defined beside that seam and only named here.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "core/comm/seams.h"
#include "core/memory/seams.h"
#include "core/model/moe.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/ddp_seams.h"
#include "core/parallel/hybrid.h"
#include "core/parallel/pipeline/seams.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero.h"
#include "core/theory/checkpoint_interval.h"
#include "core/trace/bubble_seams.h"

namespace mgpu::ex {

// Exercise 04: one rank's time within a window [t0, t1] (core/trace/bubble_seams.h).
using trace::RankIdle;

// Exercise 05: how training state is stored and sharded, and what one rank holds
// (core/memory/seams.h).
using memory::MemoryEstimate;
using memory::MemoryQuery;
using memory::Precision;

// Exercise 10: what a failure loses (core/theory/checkpoint_interval.h).
using theory::LostWork;

// What an exercise stub throws until it is written. `--impl mine` probes every exercise with a
// tiny call and falls back to the reference, saying so, for each one that still throws this.
class NotImplemented : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// The exercise functions, one table per exercise. The program picks one side (or a mix) with
// --impl and hands each part to what runs it: a World its all-reduce, a layout its functions when
// it is built, make_schedule its compute orders, a lesson's table its accounting or estimate.
struct SeamTables {
  comm::CommSeams comm;                // exercise 01
  parallel::DdpSeams ddp;              // exercise 02
  pipeline::PipelineSeams pipeline;    // exercise 03
  trace::BubbleSeams bubble;           // exercise 04
  memory::MemorySeams memory;          // exercise 05
  parallel::TpSeams tp;                // exercise 06
  parallel::CpSeams cp;                // exercise 07
  parallel::ZeroSeams zero;            // exercise 08
  MoeSeams moe;                        // exercise 09
  theory::CheckpointSeams checkpoint;  // exercise 10
  parallel::HybridSeams hybrid() const { return {tp, cp, zero, pipeline, comm.all_reduce}; }
};

// One graded exercise as the program sees it.
struct Exercise {
  std::string name;   // "ex01"
  std::string title;  // "ring all-reduce"
  // Puts this side's functions of this exercise into `tables`.
  std::function<void(SeamTables& tables)> install;
  std::function<void()> probe;  // a tiny call; throws NotImplemented while still a stub
};

}  // namespace mgpu::ex
