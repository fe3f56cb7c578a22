// The collective algorithms, written once on top of Comm's point-to-point layer (send/recv/isend/
// irecv/recv_reduce), one small file each. Every backend that runs its own algorithms (local,
// mpi, symmetric: AlgorithmicComm, algorithmic_comm.h) runs these, so threads, mpirun and the
// planner send the same messages and sum in the same order. The ring all-reduce itself is an
// exercise (solutions/ring_all_reduce.cpp); the comm receives it at construction.
#pragma once
#include "core/comm/comm.h"

namespace mgpu::comm::algorithms {

// Ring reduce-scatter: afterwards `mine` on rank r holds the sum over all ranks of
// chunk_range(n, N, r) of `in`. N-1 steps; `in` is only read and `mine` written only in the
// last step, so `mine` may be a view of `in`; scratch: two chunks (one for N = 3, none for N <= 2)
// from `allocator`, as comm_buffers.
void ring_reduce_scatter(Comm& comm, const Tensor& in, Tensor& mine, Allocator* allocator);
// Ring all-gather, in place: rank r's chunk r is valid on entry; all chunks are on exit. N-1 steps.
void ring_all_gather(Comm& comm, Tensor& buffer);
// Pairwise-exchange all-to-all (N-1 steps): block j of `in` goes to rank j; block j of `out`
// comes from rank j. in.numel() must divide by N (the caller checks).
void pairwise_all_to_all(Comm& comm, const Tensor& in, Tensor& out);
// The same exchange with variable blocks: send_counts[j] elements of `in` (packed in rank order)
// go to rank j, recv_counts[j] elements of `out` come from rank j; a zero count is no message.
// The counts must agree pairwise (the caller checks).
void pairwise_all_to_all_v(Comm& comm, const Tensor& in, std::span<const int64_t> send_counts,
                           Tensor& out, std::span<const int64_t> recv_counts);
// Comm::reduce_scatter / all_gather on top of the two rings: the same comm buffer, messages and
// summation order on every backend.
// check_my_chunk throws the CommError a wrong chunk length deserves.
void check_my_chunk(const Comm& comm, const char* op, const char* side, int64_t got, int64_t total);
void ring_reduce_scatter_into(Comm& comm, const Tensor& in, Tensor& out, ReduceOp op,
                              Allocator* allocator);
void ring_all_gather_from(Comm& comm, const Tensor& in, Tensor& out);
// Binomial-tree broadcast from `root`: ceil(log2 N) rounds.
void tree_broadcast(Comm& comm, Tensor& t, int root);
// Dissemination barrier: ceil(log2 N) rounds of empty messages.
void dissemination_barrier(Comm& comm);

// Elementwise helpers (no-ops on phantom tensors, which have shapes but no data).
void add_into(Tensor& acc, const Tensor& x);
// acc[i] += x[i] on host floats: add_into's loop, for backends that add from raw message buffers
// (recv_reduce); the same loop everywhere keeps results bit-identical.
void add_floats(float* acc, const float* x, int64_t n);
void scale(Tensor& t, float factor);

}  // namespace mgpu::comm::algorithms
