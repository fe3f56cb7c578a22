// Checkpoints: parameters, optimizer state, step and the run's config in one file.
//
// The format is safetensors-like and documented in docs/checkpoint-format.md:
//   "MGPUCKPT" | u32 version | u64 header length | JSON header | raw little-endian tensor data
// The JSON header lists every tensor (name, kind, dtype, shape, byte offset, byte length) so a
// reader (or a student with a hex dump) can find any tensor without knowing the model.
//
// Loading checks everything before it writes anything: a checkpoint of another model (a missing
// tensor, a different shape), a truncated or corrupt file all raise std::runtime_error with a
// sentence naming the file and the problem, and leave the model untouched.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/param.h"

namespace mgpu {

namespace optim {
class Optimizer;
}

inline constexpr char kCheckpointMagic[8] = {'M', 'G', 'P', 'U', 'C', 'K', 'P', 'T'};
inline constexpr uint32_t kCheckpointVersion = 1;

// One tensor as the header describes it. offset is counted from the start of the data section.
struct CheckpointEntry {
  std::string name;   // "blocks.0.attn.qkv.weight", "adamw.m.blocks.0.attn.qkv.weight"
  std::string kind;   // "param" or "optimizer_state"
  std::string dtype;  // "f32"
  Shape shape;
  int64_t offset = 0;
  int64_t length = 0;  // bytes
};

struct CheckpointInfo {
  int64_t step = 0;          // training steps done when it was saved
  nlohmann::json config;     // whatever the caller saved (model and run config)
  nlohmann::json optimizer;  // hyper-parameters + "step_count", or null when saved without one
  std::vector<CheckpointEntry> tensors;
};

// Writes `params` (and `optimizer`'s state, when given) to `path`, through a temporary file
// renamed into place so a crash never leaves half a checkpoint under the real name. Throws
// std::runtime_error when a tensor has no data (phantom device) or the file cannot be written.
void save_checkpoint(const std::string& path, const ParamList& params,
                     const optim::Optimizer* optimizer, int64_t step,
                     const nlohmann::json& config = nlohmann::json::object());

// Reads and validates the header only (magic, version, JSON, tensor extents vs. file size).
CheckpointInfo read_checkpoint_info(const std::string& path);

// Restores `params` (names and shapes must match exactly, no tensor missing or extra) and, when
// `optimizer` is given and the checkpoint holds optimizer state, its state tensors and step count
// (same optimizer kind and slices required). Returns the header: step, config, optimizer.
CheckpointInfo load_checkpoint(const std::string& path, const ParamList& params,
                               optim::Optimizer* optimizer = nullptr);

// One tensor of the full single-device model, on the host, fp32 (what the trainer gathers on rank
// 0 from every rank's shards, and what every rank reads back when it resumes).
struct CheckpointTensor {
  std::string name;  // "blocks.0.attn.qkv.weight", "adamw.m.blocks.0.attn.qkv.weight"
  std::string kind;  // "param" or "optimizer_state"
  Shape shape;
  std::vector<float> values;
};

// Writes a full-model checkpoint from host tensors; the same file format as save_checkpoint.
// `optimizer` is the hyper-parameters JSON (with "step_count"), or null.
void save_checkpoint_tensors(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                             int64_t step, const nlohmann::json& config,
                             const nlohmann::json& optimizer);

struct CheckpointContents {
  CheckpointInfo info;                    // step, config, optimizer hyper-parameters (+ step_count)
  std::vector<CheckpointTensor> tensors;  // every tensor, validated
};

// Reads and fully validates a checkpoint (throws std::invalid_argument, a std::runtime_error's
// sibling the CLI reports as bad input, with one sentence naming the file and the problem).
CheckpointContents load_checkpoint_tensors(const std::string& path);

}  // namespace mgpu
