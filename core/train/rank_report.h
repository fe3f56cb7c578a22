// What one rank reports after its last step, by name: the per-rank statistics a run returns
// (core/run/run.h: RunResult::ranks, every rank's on the root). The engine fills the common
// figures from the rank's allocator and clock; each part adds its own (a pipeline stage's stash,
// ZeRO's units, DDP's buckets), so a lesson reads named fields instead of casting the layout.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "core/data/task.h"
#include "core/runtime/allocator.h"
#include "core/runtime/context.h"

namespace mgpu::comm {
class Comm;
}

namespace mgpu::train {

// A pipeline stage (the hybrid engine): its layers and its last step's stash.
struct StageFigures {
  int pp = 0;                         // the stage's coordinate on the pp axis
  int layers = 0;                     // blocks this stage holds
  int peak_stashed = 0;               // most (micro-batch, chunk) sets forwarded, not yet B'd
  int64_t stash_bytes = 0;            // bytes of the largest single (micro-batch, chunk) set
  int64_t peak_activation_bytes = 0;  // allocator high-water mark of activations in the step
  int64_t gradient_bytes = 0;         // what the dp all-reduce carries per step (dense gradients)
};

// ZeRO's flat units: the largest one (what a ZeRO-3 gather materialises at once).
struct ZeroFigures {
  int64_t largest_unit = 0;  // elements
};

// DDP: how the gradients travelled, and the rows of the global batch this rank trained on.
struct DdpFigures {
  int buckets = 0;
  data::Batch last_shard;  // the last step's
};

// The single device's backward stores in a 2-byte type (mixed precision's lesson).
struct StoreFigures {
  int64_t flushed_to_zero = 0;  // nonzero values that rounded to 0
  int64_t unchecked = 0;        // stores a GPU made without counting them
};

struct RankReport {
  int rank = 0;
  MemoryStats memory;            // the allocator after the last step (peaks since set-up)
  double compute_seconds = 0;    // the rank's clock at the end (modeled or measured)
  double recompute_seconds = 0;  // time in "recompute" scopes on the timeline
  int64_t params_held = 0;       // parameter elements this rank's model holds
  int64_t params_updated = 0;    // parameter elements its optimizer updates
  std::optional<StageFigures> stage;
  std::optional<ZeroFigures> zero;
  std::optional<DdpFigures> ddp;
  std::optional<StoreFigures> stores;
};

// The figures every rank has: its allocator, its clock and its recompute scopes on the timeline.
RankReport measured_report(RankContext& ctx);

// Every rank's report on rank 0 of `comm` (empty elsewhere), as bytes under `tag`. Collective.
std::vector<RankReport> gather_reports(comm::Comm& comm, const RankReport& mine, int tag);

// A report as bytes and back (reports cross process boundaries under mpirun).
std::vector<uint8_t> encode(const RankReport& report);
RankReport decode_rank_report(const std::vector<uint8_t>& bytes);

}  // namespace mgpu::train
