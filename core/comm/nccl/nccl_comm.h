// The NCCL backend: one GPU per rank, CUDA tensors, NCCL collectives on a per-rank comm stream.
// Bootstrapped in-process (threads share the unique id) or over MPI (MPI_Bcast of the id).
#pragma once
#include <memory>
#include <vector>

#include "core/comm/comm.h"
#include "core/runtime/context.h"

namespace mgpu::comm::nccl {

// The 128-byte ncclUniqueId, as plain bytes so callers need not include nccl.h.
using UniqueId = std::vector<char>;
UniqueId make_unique_id();  // on one rank; share it with the others (in-process, or MPI_Bcast)

// Collective over all `size` ranks: each calls it with its own rank and context (device cuda:k).
std::unique_ptr<Comm> make_comm(RankContext& ctx, const UniqueId& id, int rank, int size,
                                double timeout_seconds);

}  // namespace mgpu::comm::nccl
