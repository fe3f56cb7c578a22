// Writing a checkpoint: the safetensors header with mgpu's __metadata__, the tensors' bytes, and
// the CRC32 of the whole file, written into the header last.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include "core/model/checkpoint.h"
#include "core/model/checkpoint_internal.h"
#include "core/optim/optimizer.h"
#include "core/runtime/output_file.h"

namespace mgpu {

using checkpoint_detail::crc32_of;
using checkpoint_detail::error;
using checkpoint_detail::kFormatName;
using nlohmann::json;

namespace checkpoint_detail {

uint32_t crc32_of(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, n));
    p += n;
    bytes -= n;
  }
  return crc;
}

}  // namespace checkpoint_detail

namespace {

// What the header needs besides the tensors.
struct HeaderFields {
  int64_t step = 0;
  json config;
  json optimizer;
  json model;  // the model's shape options ({"layers": 2, "heads": 4, ...}) or null
};

// The safetensors header: one entry per tensor plus mgpu's fields in __metadata__ (strings only).
std::string header_text(const std::vector<CheckpointEntry>& entries, const HeaderFields& h,
                        uint32_t crc) {
  json kinds = json::object();
  json header = json::object();
  for (const CheckpointEntry& e : entries) {
    header[e.name] = {
        {"dtype", "F32"}, {"shape", e.shape}, {"data_offsets", {e.offset, e.offset + e.length}}};
    kinds[e.name] = e.kind;
  }
  std::string precision = "fp32";
  if (h.config.is_object() && h.config.contains("precision") && h.config["precision"].is_string())
    precision = h.config["precision"].get<std::string>();
  header["__metadata__"] = {{"format", kFormatName},
                            {"version", std::to_string(kCheckpointVersion)},
                            {"step", std::to_string(h.step)},
                            {"config", h.config.dump()},
                            {"optimizer", h.optimizer.dump()},
                            {"precision", precision},
                            {"model", h.model.dump()},
                            {"kinds", kinds.dump()},
                            {"crc32", fmt::format("{:08x}", crc)}};
  std::string text = header.dump();
  // safetensors pads the header with spaces so the data starts 8-byte aligned (mmap-friendly).
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  return text;
}

// Writes the file: header (with the checksum's 8 digits as "00000000"), the data while computing
// the CRC32 of everything written, then the header again with the real checksum. The checksum
// covers the whole file (length, header, data) as it reads with its own digits zeroed, so an
// edited header (swapped offsets, a changed step) is caught like a flipped data byte.
void write_checkpoint_file(const std::string& path, const std::vector<CheckpointEntry>& entries,
                           const std::function<std::vector<float>(size_t)>& values,
                           const HeaderFields& h) {
  if (h.step < 0 || h.step > kCheckpointMaxStep)
    throw error(path, fmt::format("cannot be saved: step {} is outside [0, 2^40]", h.step));
  write_file_atomically(path, "checkpoint", [&](std::FILE* f) {
    const std::string placeholder = header_text(entries, h, 0);
    const uint64_t header_len = placeholder.size();
    std::fwrite(&header_len, sizeof header_len, 1, f);
    std::fwrite(placeholder.data(), 1, placeholder.size(), f);
    uint32_t crc =
        crc32_of(static_cast<uint32_t>(::crc32(0, nullptr, 0)), &header_len, sizeof header_len);
    crc = crc32_of(crc, placeholder.data(), placeholder.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::vector<float> v = values(i);  // device -> host when needed
      // A diverged run must not leave a file that looks like a checkpoint (the reader refuses
      // non-finite values too; refusing here keeps the previous file in place).
      for (size_t k = 0; k < v.size(); ++k)
        if (!std::isfinite(v[k]))
          throw std::runtime_error(fmt::format(
              "checkpoint '{}' not written: tensor '{}' holds a non-finite value ({}) at "
              "element {}",
              path, entries[i].name, v[k], k));
      crc = crc32_of(crc, v.data(), static_cast<size_t>(entries[i].length));
      std::fwrite(v.data(), 1, static_cast<size_t>(entries[i].length), f);
    }
    const std::string text = header_text(entries, h, crc);  // same length: 8 hex digits
    std::fseek(f, static_cast<long>(sizeof header_len), SEEK_SET);
    std::fwrite(text.data(), 1, text.size(), f);
  });
}

void add_entry(std::vector<CheckpointEntry>& out, int64_t& offset, const std::string& name,
               const std::string& kind, const Tensor& t, const std::string& path) {
  if (!t.has_data())
    throw error(path,
                fmt::format("cannot be saved: tensor '{}' has no data (phantom device)", name));
  if (t.dtype() != DType::f32)
    throw error(path, fmt::format("cannot be saved: tensor '{}' is {}, only f32 is supported", name,
                                  dtype_name(t.dtype())));
  out.push_back({name, kind, "f32", t.shape(), offset, t.bytes()});
  offset += t.bytes();
}

}  // namespace

void save_checkpoint(const std::string& path, const ParamList& params,
                     const optim::Optimizer* optimizer, int64_t step, const json& config,
                     const json& model) {
  // Parameters first (model order), then optimizer state.
  std::vector<CheckpointEntry> entries;
  std::vector<Tensor> tensors;
  int64_t offset = 0;
  for (const Param* p : params) {
    add_entry(entries, offset, p->name, "param", p->data, path);
    tensors.push_back(p->data);
  }
  HeaderFields h{step, config, nullptr, model};
  if (optimizer) {
    for (const optim::NamedTensor& s : optimizer->state()) {
      add_entry(entries, offset, s.name, "optimizer_state", s.tensor, path);
      tensors.push_back(s.tensor);
    }
    h.optimizer = optimizer->hyperparams();
    h.optimizer["step_count"] = optimizer->step_count();
  }
  write_checkpoint_file(
      path, entries, [&](size_t i) { return tensors[i].to_vector(); }, h);
}

void save_checkpoint_tensors(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                             int64_t step, const json& config, const json& optimizer,
                             const json& model) {
  std::vector<CheckpointEntry> entries;
  int64_t offset = 0;
  for (const CheckpointTensor& t : tensors) {
    if (static_cast<int64_t>(t.values.size()) != shape_numel(t.shape))
      throw error(path, fmt::format("cannot be saved: tensor '{}' {} has {} values", t.name,
                                    shape_str(t.shape), t.values.size()));
    const int64_t bytes = static_cast<int64_t>(t.values.size()) * 4;
    entries.push_back({t.name, t.kind, "f32", t.shape, offset, bytes});
    offset += bytes;
  }
  write_checkpoint_file(path, entries, [&](size_t i) { return tensors[i].values; },
                        {step, config, optimizer, model});
}

}  // namespace mgpu
