// Dissemination barrier. In round k every rank signals rank + 2^k and waits for rank - 2^k;
// after ceil(log2 N) rounds every rank has (transitively) heard from every other rank, so no
// rank leaves before all have arrived.
#include "core/comm/local/algorithms.h"

namespace mgpu::comm::local {

void dissemination_barrier(Comm& comm) {
  const int n = comm.size(), r = comm.rank();
  Tensor signal = Tensor::empty({0}, MemCategory::comm_buffers);
  for (int distance = 1; distance < n; distance <<= 1) {
    comm.send(signal, (r + distance) % n);
    comm.recv(signal, (r - distance + n) % n);
  }
}

}  // namespace mgpu::comm::local
