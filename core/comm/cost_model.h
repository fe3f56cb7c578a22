// The alpha-beta cost of the collective algorithms the local backend runs, for printing theory
// beside measurement. A message of b bytes over a link costs alpha + b / beta (latency plus
// bytes over bandwidth); a ring step costs one such message of one chunk, since all ranks send
// at once over their own links; the slowest link on the ring sets the pace.
//   ring all-reduce      2(N-1) (alpha + (n/N) / beta)    each rank sends 2(N-1)/N of the data
//   ring reduce-scatter   (N-1) (alpha + (n/N) / beta)
//   ring all-gather       (N-1) (alpha + (n/N) / beta)    n = bytes of the gathered result
//   pairwise all-to-all  (N-1) (alpha + (n/N) / beta)    n = bytes each rank holds; N-1 blocks
//   all-to-all-v         the same steps, each pair's own block (none for a zero count)
//   tree broadcast        ceil(log2 N) (alpha + n / beta)   with one kind of link
// Ring chunks are rounded up to whole elements; when n < N some ring steps carry empty chunks
// and cost less than the formula says (it is exact for n >= N).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/runtime/profile.h"

namespace mgpu::comm {

// Seconds for `kind` ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast";
// "all_to_all_v" with equal counts, as balanced routing sends) over the world ranks 0..ranks-1
// when everyone starts together; `bytes` is the full buffer (n elements of `elem_bytes`), chunks
// rounded up to whole elements as chunk_range does.
double alpha_beta_time(const std::string& kind, int64_t elements, int elem_bytes, int ranks,
                       const HardwareProfile& profile);

// The pairwise all-to-all-v over world ranks 0..ranks-1 starting together: counts[src * ranks +
// dst] elements go from src to dst (row src is src's send_counts).
double all_to_all_v_time(const std::vector<int64_t>& counts, int elem_bytes, int ranks,
                         const HardwareProfile& profile);

// One step in which every member i of a group sends `bytes` to member i + distance at once (a
// ring step is distance 1; the dissemination barrier and the pairwise all-to-all use others):
// the slowest of those messages, over the links between the members' world ranks.
double slowest_step(const std::vector<int>& members, int distance, double bytes,
                    const HardwareProfile& profile);
// The link of the ring 0 -> 1 -> ... -> ranks-1 -> 0 whose message of `bytes` takes longest: the
// one that sets the pace of every ring step (InfiniBand between nodes, NVLink inside one).
const LinkSpec& slowest_ring_link(int ranks, double bytes, const HardwareProfile& profile);
// A binomial-tree broadcast of `bytes` from members[root] when every member starts at 0: when the
// last member holds the data (a sender's sends go one after another; a receiver forwards once
// its copy has arrived).
double tree_broadcast_time(const std::vector<int>& members, int root, double bytes,
                           const HardwareProfile& profile);

// When each member's part of one collective ends (group-rank order) if member i of `members`
// (world ranks, in group-rank order) starts it at starts[i] (none given: all at 0), following the
// shared algorithms' messages one by one as the local backend's clock does: a send keeps its
// sender's comm lane busy for the transfer, a receive ends when its message has arrived. It is
// the local backend's emergent time exactly, uneven chunks, mixed links and late members
// included; a backend that cannot time its messages itself (NCCL on the modeled clock) charges
// it. kind: "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast" (from
// `root`) or "barrier"; `elements` as the trace's bytes count them (all_gather: the result).
std::vector<double> member_end_times(const std::string& kind, const std::vector<int>& members,
                                     int64_t elements, int elem_bytes, int root,
                                     const HardwareProfile& profile,
                                     std::span<const double> starts = {});

// all_to_all_v as one member sees it, knowing only its own counts: step s of the pairwise
// exchange ends when its block for rank + s has left and the block from rank - s has arrived,
// that partner taken to start the step together with it.
double all_to_all_v_member_time(const std::vector<int>& members, int rank,
                                std::span<const int64_t> send_counts,
                                std::span<const int64_t> recv_counts, int elem_bytes,
                                const HardwareProfile& profile);

}  // namespace mgpu::comm
