// Each rule follows its algorithm's loop (the files beside this one); test_comm_sent_bytes.cpp
// checks it against what the local backend's send path counts, rank by rank.
#include "core/comm/algorithms/sent_bytes.h"

#include "core/comm/comm.h"
#include "core/theory/collectives.h"

namespace mgpu::comm::algorithms {

namespace {
int64_t chunk_length(int64_t elements, int size, int index) {
  const auto [begin, end] = chunk_range(elements, size, ((index % size) + size) % size);
  return end - begin;
}
}  // namespace

int64_t all_reduce_sent_bytes(int64_t elements, int elem_bytes, int size, int rank) {
  return reduce_scatter_sent_bytes(elements, elem_bytes, size, rank) +
         all_gather_sent_bytes(elements, elem_bytes, size, rank);
}

int64_t reduce_scatter_sent_bytes(int64_t elements, int elem_bytes, int size, int rank) {
  return (elements - chunk_length(elements, size, rank)) * elem_bytes;
}

int64_t all_gather_sent_bytes(int64_t elements, int elem_bytes, int size, int rank) {
  return (elements - chunk_length(elements, size, rank + 1)) * elem_bytes;
}

int64_t all_to_all_sent_bytes(int64_t elements, int elem_bytes, int size) {
  return (size - 1) * (elements / size) * elem_bytes;
}

int64_t all_to_all_v_sent_bytes(std::span<const int64_t> send_counts, int elem_bytes, int rank) {
  return theory::moe_dispatch_sent_bytes(send_counts, rank, 1, elem_bytes);
}

int64_t broadcast_sent_bytes(int64_t elements, int elem_bytes, int size, int rank, int root) {
  const int v = (rank - root + size) % size;  // numbered from the root, as tree_broadcast does
  int children = 0;
  for (int mask = 1; mask < size; mask <<= 1)
    if (v < mask && v + mask < size) ++children;
  return children * elements * elem_bytes;
}

}  // namespace mgpu::comm::algorithms
