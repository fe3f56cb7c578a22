// The trainer's checkpoint pieces (checkpoint_shards.cpp); the public ones (partitioned_shards,
// whole_tensor_shards, read_resume_checkpoint) are declared in trainer.h.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "core/train/trainer.h"

namespace mgpu::train {

// Copies this rank's shards out of the full tensors of a checkpoint (and its optimizer's step
// count and loss scaler).
void restore_shards(Layout& layout, const CheckpointContents& ckpt, const std::string& path);
// This rank's writer shards: a JSON description (names, shapes, runs) and their values in order.
std::pair<std::string, std::vector<float>> describe_writer_shards(Layout& layout);
// Every rank's writer shards on rank 0 (empty elsewhere), through `comm`: a header (text) and
// the values per rank, with the trainer's two tags. Collective.
std::vector<std::pair<std::string, std::vector<float>>> gather_writer_shards(comm::Comm& comm,
                                                                             Layout& layout,
                                                                             int header_tag,
                                                                             int data_tag);
// Rank 0: every rank's writer shards placed into full tensors, parameters first, each tensor in
// the order it first appears (rank 0's first). Every element must be written exactly once.
std::vector<CheckpointTensor> assemble(
    const std::vector<std::pair<std::string, std::vector<float>>>& per_rank);

}  // namespace mgpu::train
