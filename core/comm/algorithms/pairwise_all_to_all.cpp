// Pairwise-exchange all-to-all. Block j of `in` belongs to rank j. In step s (1..N-1) every rank
// sends its block for rank r+s and receives, from rank r-s, the block that rank holds for it:
// N-1 steps in which every rank both sends and receives one block, so no link carries more than
// one message at a time. Rank r's own block is copied locally. all_to_all's blocks are n/N
// elements each; all_to_all_v's are the counts the caller gives (MoE dispatch: the tokens bound
// for each rank's experts), packed in rank order.
#include <vector>

#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::algorithms {

namespace {

// The schedule both forms share; `outgoing(j)` / `incoming(j)` are the views of the blocks for
// and from rank j. An empty block is no message (both sides know its size).
template <class Outgoing, class Incoming>
void pairwise_exchange(Comm& comm, Outgoing outgoing, Incoming incoming) {
  const int n = comm.size(), r = comm.rank();
  Tensor own = incoming(r);
  own.copy_from(outgoing(r));
  for (int step = 1; step < n; ++step) {
    const int to = (r + step) % n, from = (r - step + n) % n;
    Tensor to_send = outgoing(to), to_receive = incoming(from);
    // Post the send first and wait for it after the recv (as the ring does): blocking sends on
    // every rank at once would deadlock a backend without buffering.
    comm::Work sending;
    if (to_send.numel() > 0) sending = comm.isend(to_send, to);
    if (to_receive.numel() > 0) comm.recv(to_receive, from);
    sending.wait();
  }
}

// Where each rank's block starts when blocks of `counts` elements are packed in rank order.
std::vector<int64_t> offsets_of(std::span<const int64_t> counts) {
  std::vector<int64_t> offsets(counts.size() + 1, 0);
  for (size_t j = 0; j < counts.size(); ++j) offsets[j + 1] = offsets[j] + counts[j];
  return offsets;
}

}  // namespace

void pairwise_all_to_all(Comm& comm, const Tensor& in, Tensor& out) {
  const int64_t block = in.numel() / comm.size();
  auto block_of = [block](const Tensor& t) {
    return [&t, block](int index) { return t.flat_range(index * block, (index + 1) * block); };
  };
  pairwise_exchange(comm, block_of(in), block_of(out));
}

void pairwise_all_to_all_v(Comm& comm, const Tensor& in, std::span<const int64_t> send_counts,
                           Tensor& out, std::span<const int64_t> recv_counts) {
  const std::vector<int64_t> send_at = offsets_of(send_counts), recv_at = offsets_of(recv_counts);
  pairwise_exchange(
      comm, [&](int j) { return in.flat_range(send_at[j], send_at[j + 1]); },
      [&](int j) { return out.flat_range(recv_at[j], recv_at[j + 1]); });
}

}  // namespace mgpu::comm::algorithms
