// Dissemination barrier. In round k every rank signals rank + 2^k and waits for rank - 2^k;
// after ceil(log2 N) rounds every rank has (transitively) heard from every other rank, so no
// rank leaves before all have arrived.
#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::algorithms {

void dissemination_barrier(Comm& comm) {
  const int n = comm.size(), r = comm.rank();
  Tensor signal = Tensor::empty({0}, MemCategory::comm_buffers);
  for (int distance = 1; distance < n; distance <<= 1) {
    // Post the send first and wait for it after the recv: if every rank did a blocking
    // send at once, a backend without buffering (MPI, large messages) would deadlock.
    comm::Work sending = comm.isend(signal, (r + distance) % n);
    comm.recv(signal, (r - distance + n) % n);
    sending.wait();
  }
}

}  // namespace mgpu::comm::algorithms
