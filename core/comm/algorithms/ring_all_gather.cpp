// Ring all-gather. Each step every rank forwards the chunk it got last step to its right
// neighbour; after N-1 steps every rank has every chunk. Received chunks land in place.
#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::algorithms {

void ring_all_gather(Comm& comm, Tensor& buffer) {
  const int n = comm.size(), r = comm.rank();
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  auto chunk = [&](int index) { return ring_chunk(buffer, n, index); };
  for (int step = 0; step < n - 1; ++step) {
    Tensor outgoing = chunk(r - step);
    Tensor incoming = chunk(r - step - 1);
    // Post the send first and wait for it after the recv: if every rank did a blocking
    // send at once, a backend without buffering (MPI, large messages) would deadlock.
    comm::Work sending = comm.isend(outgoing, right);
    comm.recv(incoming, left);
    sending.wait();
  }
}

}  // namespace mgpu::comm::algorithms
