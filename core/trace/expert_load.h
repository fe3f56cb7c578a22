// What a trace says about a mixture-of-experts run's routing and its expert exchanges: expert
// parallelism labels its all-to-alls "dispatch" / "combine" ("... bwd" in the backward pass) and
// its per-expert counts' exchange "dispatch counts", whose Event::counts are the rank's kept
// (token, choice) slots per expert for that MoE block. The expert_parallel lesson, the ASCII
// timeline and the dashboard all read them here.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime/trace_event.h"

namespace mgpu::trace {

// A comm event of an expert exchange (its counts' exchange included).
bool is_dispatch(const Event& e);  // "dispatch", "dispatch counts", "dispatch bwd"
bool is_combine(const Event& e);   // "combine", "combine bwd"

// One MoE block's routing in one step: per rank, its kept slots per expert.
struct ExpertLoad {
  int layer = -1;                              // the block
  std::vector<std::vector<int64_t>> per_rank;  // [rank][expert]; empty for a rank without it
  std::vector<int64_t> total() const;          // [expert], summed over the ranks
};
// The MoE blocks of `step` (every step's when none), in block order.
std::vector<ExpertLoad> expert_loads(const Trace& trace, std::optional<int> step);

// Bytes `rank` put on the wire in the all_to_all_v events named `exchange` ("dispatch",
// "combine", "dispatch bwd", "combine bwd"; "" = all four) of MoE block `layer` (-1: every
// block) during `step`.
int64_t exchange_sent_bytes(const Trace& trace, std::optional<int> step, int rank,
                            const std::string& exchange, int layer = -1);

}  // namespace mgpu::trace
