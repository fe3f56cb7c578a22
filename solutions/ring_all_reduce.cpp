// Reference ring all-reduce, written only with send/recv.
//
// The N ranks form a ring; rank r sends to r+1 and receives from r-1. The tensor is cut into N
// chunks (chunk_range: lengths need not divide by N). Two phases of N-1 steps each:
//  1. reduce-scatter: each step, send one chunk right and add the chunk arriving from the left
//     (recv_reduce: receive and add in one pass; a recv into a temporary + add is the same sum).
//     After N-1 steps rank r holds the complete sum of chunk r.
//  2. all-gather: each step, forward the complete chunk received last step. After N-1 steps
//     every rank holds every complete chunk.
// Every rank sends 2(N-1) messages of n/N elements: the bytes each link carries do not grow with
// N, which is why the ring is bandwidth-optimal. For avg we sum, then divide once at the end.
#include "exercises/exercises.h"

namespace mgpu::reference {

void ring_all_reduce(comm::Comm& comm, Tensor& t, comm::ReduceOp op) {
  const int n = comm.size(), r = comm.rank();
  const int right = (r + 1) % n, left = (r - 1 + n) % n;

  // Phase 1, reduce-scatter: at step s send chunk r-s-1, accumulate into chunk r-s-2, so that
  // after N-1 steps chunk r on rank r has collected all N contributions.
  for (int step = 0; step < n - 1; ++step) {
    Tensor outgoing = comm::ring_chunk(t, n, r - step - 1);
    Tensor accumulate = comm::ring_chunk(t, n, r - step - 2);
    // Post the send first and wait for it after the recv: if every rank did a blocking
    // send at once, a backend without buffering (MPI, large messages) would deadlock.
    comm::Work sending = comm.isend(outgoing, right);
    comm.recv_reduce(accumulate, left);  // accumulate += the chunk arriving from the left
    sending.wait();
  }

  // Phase 2, all-gather: at step s send the complete chunk r-s, receive complete chunk r-s-1
  // straight into place.
  for (int step = 0; step < n - 1; ++step) {
    Tensor outgoing = comm::ring_chunk(t, n, r - step);
    Tensor incoming = comm::ring_chunk(t, n, r - step - 1);
    // Post the send first and wait for it after the recv: if every rank did a blocking
    // send at once, a backend without buffering (MPI, large messages) would deadlock.
    comm::Work sending = comm.isend(outgoing, right);
    comm.recv(incoming, left);
    sending.wait();
  }

  // Divide (not scale by 1/N): exact as a / N. comm::divide works on a GPU's memory too.
  if (op == comm::ReduceOp::avg) comm::divide(t, static_cast<float>(n));
}

}  // namespace mgpu::reference
