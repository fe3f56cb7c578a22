// The bytes one rank puts on the wire in each collective as the shared algorithms (algorithms.h,
// and the reference ring all-reduce of exercise 01) run it: the rule behind trace sent_bytes.
// The backends that run those algorithms count the bytes in their send path, so the figure
// emerges; a backend that calls a library instead (NCCL) records these, so the same collective
// shows the same sent_bytes on every backend. Counts are in elements of `elem_bytes` bytes;
// `size` ranks, this is group rank `rank`; ring chunks are chunk_range's (uneven lengths give
// uneven chunks, and a chunk sent is never the rank's own).
#pragma once
#include <cstdint>
#include <span>

namespace mgpu::comm::algorithms {

// Ring all-reduce of `elements`: the reduce-scatter sends every chunk but r, the all-gather
// every chunk but r+1.
int64_t all_reduce_sent_bytes(int64_t elements, int elem_bytes, int size, int rank);
// Ring reduce-scatter of the full `elements`: every chunk but the rank's own.
int64_t reduce_scatter_sent_bytes(int64_t elements, int elem_bytes, int size, int rank);
// Ring all-gather into the full `elements`: every chunk but r+1's (the last one to arrive).
int64_t all_gather_sent_bytes(int64_t elements, int elem_bytes, int size, int rank);
// Pairwise all-to-all of `elements` (size equal blocks): every block but the rank's own.
int64_t all_to_all_sent_bytes(int64_t elements, int elem_bytes, int size);
// Pairwise all-to-all-v: send_counts[j] elements to each j but the rank itself.
int64_t all_to_all_v_sent_bytes(std::span<const int64_t> send_counts, int elem_bytes, int rank);
// Binomial-tree broadcast of `elements` from `root`: the whole buffer once per child.
int64_t broadcast_sent_bytes(int64_t elements, int elem_bytes, int size, int rank, int root);
// The dissemination barrier's messages are empty.
constexpr int64_t barrier_sent_bytes() {
  return 0;
}

}  // namespace mgpu::comm::algorithms
