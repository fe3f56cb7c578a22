// A symmetric group: a tensor-, context- or data-parallel group of which only this rank runs. Its
// other members are implied mirrors that do the same work at the same time (the planner's
// representative simulation, core/plan/simulate.h), so nothing is exchanged; what the group's
// communication costs is still worked out by the shared algorithms every backend runs (the ring
// all-reduce seam, ring reduce-scatter / all-gather, pairwise all-to-all, dissemination barrier),
// run against the mirrors:
//   - a message this rank sends to the member d places ahead is matched by the one it receives
//     from the member d places behind, sent by that mirror at the same moment;
//   - each such step costs the slowest of the group's links at that distance, between the
//     members' FULL world ranks (HardwareProfile::link: a tp group across two nodes pays the
//     inter-node link), as when every member arrives at once.
// So the comm buffers the algorithms allocate, the bytes this rank puts on the wire (trace
// sent_bytes), the comm lane and the async behaviour are those of a full run. Tensors must be
// phantom (shapes only): a tensor with values is refused, since no values could arrive.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/runtime/context.h"

namespace mgpu::comm {

// `members`: the group's world ranks in group-rank order; this rank is members[my_index]. `ctx`
// is the running rank (its clock, allocator and tracer), on the modeled clock; `profile` prices
// the links between world ranks (the full world's profile).
std::unique_ptr<Comm> make_symmetric_comm(RankContext& ctx, const HardwareProfile& profile,
                                          std::vector<int> members, int my_index, std::string name);

}  // namespace mgpu::comm
