// Pairwise-exchange all-to-all. Block j of `in` belongs to rank j. In step s (1..N-1) every rank
// sends its block for rank r+s and receives, from rank r-s, the block that rank holds for it:
// N-1 steps in which every rank both sends and receives one block of n/N elements, so no link
// carries more than one message at a time. Rank r's own block is copied locally.
#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::algorithms {

void pairwise_all_to_all(Comm& comm, const Tensor& in, Tensor& out) {
  const int n = comm.size(), r = comm.rank();
  const int64_t block = in.numel() / n;
  auto block_of = [block](const Tensor& t, int index) {
    return t.flat_range(index * block, (index + 1) * block);
  };
  Tensor own = block_of(out, r);
  own.copy_from(block_of(in, r));
  for (int step = 1; step < n; ++step) {
    const int to = (r + step) % n, from = (r - step + n) % n;
    Tensor incoming = block_of(out, from);
    // Post the send first and wait for it after the recv (as the ring does): blocking sends on
    // every rank at once would deadlock a backend without buffering.
    comm::Work sending = comm.isend(block_of(in, to), to);
    comm.recv(incoming, from);
    sending.wait();
  }
}

}  // namespace mgpu::comm::algorithms
