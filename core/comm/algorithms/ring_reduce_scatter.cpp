// Ring reduce-scatter. Each step every rank sends a partial sum of one chunk to its right
// neighbour and adds its own values of the next chunk to the partial sum arriving from its left;
// after N-1 steps each chunk has visited every rank. The chunk indices are shifted so that rank r
// ends up owning chunk r. Out of place: `in` is only read; a partial sum is built in one of two
// spare chunks, taking turns, so the one still on its way right is never the one being received
// into, and the last (chunk r, the result) in `mine`.
#include <algorithm>

#include "core/comm/algorithms/algorithms.h"

namespace mgpu::comm::algorithms {

void ring_reduce_scatter(Comm& comm, const Tensor& in, Tensor& mine, Allocator* allocator) {
  const int n = comm.size(), r = comm.rank();
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  if (n == 1) {  // no ring: my values are the sum
    mine.copy_from(in);
    return;
  }
  auto my_values = [&](int index) { return ring_chunk(in, n, index); };
  // Two chunks of scratch instead of a copy of all of `in` (chunk 0 is the largest); a ring of
  // 2 needs none, a ring of 3 one.
  const int64_t largest = chunk_range(in.numel(), n, 0).second;
  const int spares = std::min(n - 2, 2);
  Tensor scratch;
  if (spares > 0)
    scratch = Tensor::empty({spares * largest}, MemCategory::comm_buffers, in.dtype(), allocator);
  Tensor outgoing = my_values(r - 1);  // step 0 sends my own values of chunk r-1
  for (int step = 0; step < n - 1; ++step) {
    Tensor values = my_values(r - step - 2);
    const int64_t spare_begin = (step % 2) * largest;
    Tensor partial =
        step == n - 2 ? mine : scratch.flat_range(spare_begin, spare_begin + values.numel());
    partial.copy_from(values);
    // Post the send first and wait for it after the recv: if every rank did a blocking
    // send at once, a backend without buffering (MPI, large messages) would deadlock.
    comm::Work sending = comm.isend(outgoing, right);
    comm.recv_reduce(partial, left);  // partial += the partial sum arriving from the left
    sending.wait();
    outgoing = partial;
  }
}

}  // namespace mgpu::comm::algorithms
