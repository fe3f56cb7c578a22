// Checkpoints: parameters, optimizer state, step and the run's config in one file.
//
// The file is a real safetensors file (docs/checkpoint-format.md), so PyTorch / Hugging Face
// tools open it:  u64 header length | JSON header | raw little-endian tensor data.
// The header maps each tensor name to {dtype "F32", shape, data_offsets}; mgpu's own header
// (format, version, step, config, optimizer, precision, model, tensor kinds, CRC32 of the whole
// file) lives in "__metadata__" as string values, as the safetensors spec requires. Older files
// (version 2, whose CRC covered only the data, and the "MGPUCKPT" version 1, with none) are
// refused: their headers cannot be trusted.
//
// Loading checks everything before it writes anything: a checkpoint of another model (a missing
// tensor, a different shape), a truncated, inconsistent or corrupt file (offsets, alignment,
// overlaps, duplicate names, absurd shapes or step, non-finite values, a negative Adam second
// moment, optimizer state that does not match the parameters, checksum) all raise
// std::invalid_argument (bad input: exit 2 in the CLI) with a sentence naming the file and the
// problem, and leave the model untouched.
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

// The first 8 bytes of a version 1 file (refused with its own message).
inline constexpr char kCheckpointMagic[8] = {'M', 'G', 'P', 'U', 'C', 'K', 'P', 'T'};
// safetensors + mgpu __metadata__, CRC32 over the whole file (version 2: over the data only).
inline constexpr uint32_t kCheckpointVersion = 3;
// Limits a loaded file must respect (a corrupt or hostile header cannot overflow or exhaust).
inline constexpr int64_t kCheckpointMaxStep = int64_t{1} << 40;
inline constexpr int64_t kCheckpointMaxHeaderBytes = int64_t{100} << 20;
inline constexpr int kCheckpointMaxRank = 8;

// One tensor as the header describes it. offset is counted from the start of the data section.
struct CheckpointEntry {
  std::string name;   // "blocks.0.attn.qkv.weight", "adamw.m.blocks.0.attn.qkv.weight"
  std::string kind;   // "param" or "optimizer_state"
  std::string dtype;  // "f32" (safetensors spells it "F32" in the file)
  Shape shape;
  int64_t offset = 0;  // data_offsets[0]
  int64_t length = 0;  // bytes: data_offsets[1] - data_offsets[0]
};

struct CheckpointInfo {
  int64_t step = 0;          // training steps done when it was saved
  nlohmann::json config;     // whatever the caller saved (model and run config)
  nlohmann::json optimizer;  // hyper-parameters + "step_count", or null when saved without one
  std::string precision = "fp32";  // the training precision the run used
  // The model's shape options as the saving run gave them ({"layers": 2, "heads": 4, ...}), or
  // null; a resuming run compares its own (train::TrainOptions::model).
  nlohmann::json model;
  uint32_t version = kCheckpointVersion;
  std::vector<CheckpointEntry> tensors;  // in data order
};

// Writes `params` (and `optimizer`'s state, when given) to `path`, through a temporary file in
// the same folder renamed into place so a crash never leaves half a checkpoint under the real
// name; it renames only over a regular file or nothing (never a device, folder or fifo). Throws
// std::invalid_argument when a tensor has no data (phantom device) or the file cannot be written.
// A tensor holding NaN or inf is refused (std::runtime_error) and the previous file kept.
void save_checkpoint(const std::string& path, const ParamList& params,
                     const optim::Optimizer* optimizer, int64_t step,
                     const nlohmann::json& config = nlohmann::json::object(),
                     const nlohmann::json& model = nullptr);

// Reads and validates the header only (format, version, JSON, every tensor's extent).
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
// `optimizer` is the hyper-parameters JSON (with "step_count"), or null; `model` the model's
// shape options, or null.
void save_checkpoint_tensors(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                             int64_t step, const nlohmann::json& config,
                             const nlohmann::json& optimizer,
                             const nlohmann::json& model = nullptr);

struct CheckpointContents {
  CheckpointInfo info;                    // step, config, optimizer hyper-parameters (+ step_count)
  std::vector<CheckpointTensor> tensors;  // every tensor, validated
};

// Reads and fully validates a checkpoint (throws std::invalid_argument, a std::runtime_error's
// sibling the CLI reports as bad input, with one sentence naming the file and the problem).
CheckpointContents load_checkpoint_tensors(const std::string& path);

// Validates a checkpoint held in memory (the fuzz target's entry; `name` stands for the path in
// messages). Same checks as load_checkpoint_tensors.
CheckpointContents parse_checkpoint_bytes(const std::string& name, const std::string& bytes);

}  // namespace mgpu
