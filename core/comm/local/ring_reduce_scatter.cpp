// Ring reduce-scatter. Each step every rank sends one chunk to its right neighbour and adds the
// chunk arriving from its left neighbour; after N-1 steps each chunk has visited every rank.
// The chunk indices are shifted so that rank r ends up owning chunk r.
#include "core/comm/local/algorithms.h"

namespace mgpu::comm::local {

void ring_reduce_scatter(Comm& comm, Tensor& buffer) {
  const int n = comm.size(), r = comm.rank();
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  auto chunk = [&](int index) { return ring_chunk(buffer, n, index); };
  for (int step = 0; step < n - 1; ++step) {
    Tensor outgoing = chunk(r - step - 1);
    Tensor accumulate = chunk(r - step - 2);
    // Post the send first and wait for it after the recv: if every rank did a blocking
    // send at once, a backend without buffering (MPI, large messages) would deadlock.
    comm::Work sending = comm.isend(outgoing, right);
    comm.recv_reduce(accumulate, left);  // accumulate += the chunk arriving from the left
    sending.wait();
  }
}

}  // namespace mgpu::comm::local
