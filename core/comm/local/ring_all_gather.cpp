// Ring all-gather. Each step every rank forwards the chunk it got last step to its right
// neighbour; after N-1 steps every rank has every chunk. Received chunks land in place.
#include "core/comm/local/algorithms.h"

namespace mgpu::comm::local {

void ring_all_gather(Comm& comm, Tensor& buffer) {
  const int n = comm.size(), r = comm.rank();
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  auto chunk = [&](int index) {
    auto [begin, end] = chunk_range(buffer.numel(), n, ((index % n) + n) % n);
    return buffer.flat_range(begin, end);
  };
  for (int step = 0; step < n - 1; ++step) {
    Tensor outgoing = chunk(r - step);
    Tensor incoming = chunk(r - step - 1);
    comm.send(outgoing, right);
    comm.recv(incoming, left);
  }
}

}  // namespace mgpu::comm::local
