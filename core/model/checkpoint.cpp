#include "core/model/checkpoint.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "core/optim/optimizer.h"

namespace mgpu {

// The data section is the host's float bytes as they are; the format says little-endian.
static_assert(std::endian::native == std::endian::little,
              "checkpoints assume a little-endian host");

namespace {

constexpr int64_t kPreambleBytes = 8 + 4 + 8;  // magic, version, header length

// A tensor to write: its header entry and where its values come from.
struct Source {
  CheckpointEntry entry;
  Tensor tensor;
};

// A checkpoint is a file the user named, so its problems are bad input (std::invalid_argument:
// the program reports them in one line with exit code 2).
std::invalid_argument error(const std::string& path, const std::string& what) {
  return std::invalid_argument(fmt::format("checkpoint '{}' {}", path, what));
}

void add_source(std::vector<Source>& out, int64_t& offset, const std::string& name,
                const std::string& kind, const Tensor& t, const std::string& path) {
  if (!t.has_data())
    throw error(path,
                fmt::format("cannot be saved: tensor '{}' has no data (phantom device)", name));
  if (t.dtype() != DType::f32)
    throw error(path, fmt::format("cannot be saved: tensor '{}' is {}, only f32 is supported", name,
                                  dtype_name(t.dtype())));
  CheckpointEntry e{name, kind, "f32", t.shape(), offset, t.bytes()};
  offset += e.length;
  out.push_back({e, t});
}

nlohmann::json entry_to_json(const CheckpointEntry& e) {
  return {{"name", e.name},   {"kind", e.kind},     {"dtype", e.dtype},
          {"shape", e.shape}, {"offset", e.offset}, {"length", e.length}};
}

}  // namespace

namespace {

// Writes preamble, header and data to a temporary file renamed into place when complete, so a
// crash never leaves half a checkpoint under the real name. values(i) gives entry i's floats.
void write_checkpoint_file(const std::string& path, const std::vector<CheckpointEntry>& entries,
                           const std::function<std::vector<float>(size_t)>& values, int64_t step,
                           const nlohmann::json& config, const nlohmann::json& optimizer) {
  // The JSON header, padded with spaces so the data starts 8-byte aligned (mmap-friendly).
  nlohmann::json header;
  header["format"] = "mgpu-checkpoint";
  header["step"] = step;
  header["config"] = config;
  header["optimizer"] = optimizer;
  header["tensors"] = nlohmann::json::array();
  for (const CheckpointEntry& e : entries) header["tensors"].push_back(entry_to_json(e));
  std::string text = header.dump();
  while ((kPreambleBytes + static_cast<int64_t>(text.size())) % 8 != 0) text.push_back(' ');

  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw error(path, fmt::format("cannot be written: cannot open '{}'", tmp));
    const uint32_t version = kCheckpointVersion;
    const uint64_t header_len = text.size();
    out.write(kCheckpointMagic, 8);
    out.write(reinterpret_cast<const char*>(&version), sizeof version);
    out.write(reinterpret_cast<const char*>(&header_len), sizeof header_len);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (size_t i = 0; i < entries.size(); ++i) {
      std::vector<float> v = values(i);
      out.write(reinterpret_cast<const char*>(v.data()), entries[i].length);
    }
    out.flush();
    if (!out) throw error(path, "cannot be written: write failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

void save_checkpoint(const std::string& path, const ParamList& params,
                     const optim::Optimizer* optimizer, int64_t step,
                     const nlohmann::json& config) {
  // Parameters first (model order), then optimizer state.
  std::vector<Source> sources;
  int64_t offset = 0;
  for (const Param* p : params) add_source(sources, offset, p->name, "param", p->data, path);
  if (optimizer)
    for (const optim::NamedTensor& s : optimizer->state())
      add_source(sources, offset, s.name, "optimizer_state", s.tensor, path);
  nlohmann::json hyper = nullptr;
  if (optimizer) {
    hyper = optimizer->hyperparams();
    hyper["step_count"] = optimizer->step_count();
  }
  std::vector<CheckpointEntry> entries;
  for (const Source& s : sources) entries.push_back(s.entry);
  write_checkpoint_file(
      path, entries, [&](size_t i) { return sources[i].tensor.to_vector(); }, step, config, hyper);
}

void save_checkpoint_tensors(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                             int64_t step, const nlohmann::json& config,
                             const nlohmann::json& optimizer) {
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
  write_checkpoint_file(
      path, entries, [&](size_t i) { return tensors[i].values; }, step, config, optimizer);
}

namespace {

// The parsed header plus where the data section starts and how long it is.
struct Layout {
  CheckpointInfo info;
  int64_t data_start = 0;
  int64_t data_bytes = 0;
};

Layout read_layout(const std::string& path, std::ifstream& in) {
  if (!in) throw error(path, fmt::format("cannot be opened: {}", std::strerror(errno)));
  in.seekg(0, std::ios::end);
  const int64_t file_bytes = in.tellg();
  in.seekg(0);
  if (file_bytes < kPreambleBytes)
    throw error(path, fmt::format("is truncated: {} bytes, shorter than the {}-byte preamble",
                                  file_bytes, kPreambleBytes));
  char magic[8];
  uint32_t version = 0;
  uint64_t header_len = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&version), sizeof version);
  in.read(reinterpret_cast<char*>(&header_len), sizeof header_len);
  if (std::memcmp(magic, kCheckpointMagic, 8) != 0)
    throw error(path, "is not an mgpu checkpoint (the file does not start with \"MGPUCKPT\")");
  if (version != kCheckpointVersion)
    throw error(path, fmt::format("has format version {}; this build reads version {}", version,
                                  kCheckpointVersion));
  if (header_len > static_cast<uint64_t>(file_bytes - kPreambleBytes))
    throw error(path,
                fmt::format("is truncated: the header says {} bytes of JSON but only {} follow",
                            header_len, file_bytes - kPreambleBytes));

  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  Layout layout;
  layout.data_start = kPreambleBytes + static_cast<int64_t>(header_len);
  layout.data_bytes = file_bytes - layout.data_start;
  try {
    nlohmann::json h = nlohmann::json::parse(text);
    layout.info.step = h.at("step").get<int64_t>();
    layout.info.config = h.value("config", nlohmann::json::object());
    layout.info.optimizer = h.value("optimizer", nlohmann::json());
    for (const nlohmann::json& t : h.at("tensors")) {
      CheckpointEntry e;
      e.name = t.at("name").get<std::string>();
      e.kind = t.at("kind").get<std::string>();
      e.dtype = t.at("dtype").get<std::string>();
      e.shape = t.at("shape").get<Shape>();
      e.offset = t.at("offset").get<int64_t>();
      e.length = t.at("length").get<int64_t>();
      layout.info.tensors.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& ex) {
    throw error(path, fmt::format("has a corrupt header: {}", ex.what()));
  }

  // Every tensor must be f32, consistent with its shape, and lie inside the file.
  for (const CheckpointEntry& e : layout.info.tensors) {
    if (e.dtype != "f32")
      throw error(path, fmt::format("has tensor '{}' of dtype '{}'; only f32 is supported", e.name,
                                    e.dtype));
    if (e.length != shape_numel(e.shape) * 4 || e.offset < 0)
      throw error(path, fmt::format("has a corrupt header: tensor '{}' {} has length {}", e.name,
                                    shape_str(e.shape), e.length));
    if (e.offset + e.length > layout.data_bytes)
      throw error(path, fmt::format("is truncated: tensor '{}' needs data bytes [{}, {}) but the "
                                    "file holds only {}",
                                    e.name, e.offset, e.offset + e.length, layout.data_bytes));
  }
  return layout;
}

// Finds the entry for each name in `names`; checks nothing is missing or extra of this kind.
std::map<std::string, const CheckpointEntry*> match_entries(const std::string& path,
                                                            const CheckpointInfo& info,
                                                            const std::string& kind,
                                                            const std::vector<std::string>& names,
                                                            const std::string& owner) {
  std::map<std::string, const CheckpointEntry*> by_name;
  for (const CheckpointEntry& e : info.tensors)
    if (e.kind == kind) by_name[e.name] = &e;
  for (const std::string& n : names)
    if (!by_name.count(n))
      throw error(path, fmt::format("has no tensor '{}' but the {} expects one", n, owner));
  if (by_name.size() != names.size()) {
    for (auto& [n, e] : by_name)
      if (std::find(names.begin(), names.end(), n) == names.end())
        throw error(path, fmt::format("has tensor '{}' that the {} does not have", n, owner));
  }
  return by_name;
}

void check_shape(const std::string& path, const CheckpointEntry& e, const Shape& expected,
                 const std::string& owner) {
  if (e.shape != expected)
    throw error(path, fmt::format("has {} {} but the {} expects {}", e.name, shape_str(e.shape),
                                  owner, shape_str(expected)));
}

// Copies one tensor's bytes from the data section into `dst` (host or device).
void restore(const std::vector<char>& data, const CheckpointEntry& e, Tensor dst) {
  std::vector<float> values(static_cast<size_t>(e.length / 4));
  std::memcpy(values.data(), data.data() + e.offset, static_cast<size_t>(e.length));
  if (dst.has_data()) dst.copy_from(Tensor::from(dst.shape(), values, MemCategory::workspace));
}

}  // namespace

CheckpointInfo read_checkpoint_info(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return read_layout(path, in).info;
}

CheckpointInfo load_checkpoint(const std::string& path, const ParamList& params,
                               optim::Optimizer* optimizer) {
  std::ifstream in(path, std::ios::binary);
  Layout layout = read_layout(path, in);
  const CheckpointInfo& info = layout.info;

  // 1. Validate everything before touching the model.
  std::vector<std::string> param_names;
  for (const Param* p : params) param_names.push_back(p->name);
  auto param_entries = match_entries(path, info, "param", param_names, "model");
  for (const Param* p : params)
    check_shape(path, *param_entries[p->name], p->data.shape(), "model");

  const bool restore_optimizer = optimizer && !info.optimizer.is_null();
  std::map<std::string, const CheckpointEntry*> state_entries;
  if (restore_optimizer) {
    std::string saved = info.optimizer.value("name", std::string("?"));
    if (saved != optimizer->name())
      throw error(path, fmt::format("holds {} optimizer state but the optimizer is {}", saved,
                                    optimizer->name()));
    std::vector<std::string> state_names;
    for (const optim::NamedTensor& s : optimizer->state()) state_names.push_back(s.name);
    state_entries = match_entries(path, info, "optimizer_state", state_names, "optimizer");
    for (const optim::NamedTensor& s : optimizer->state())
      check_shape(path, *state_entries[s.name], s.tensor.shape(), "optimizer");
  }

  // 2. Read the data section and copy every tensor into place.
  std::vector<char> data(static_cast<size_t>(layout.data_bytes));
  in.seekg(layout.data_start);
  in.read(data.data(), layout.data_bytes);
  if (!in) throw error(path, "could not be read to the end");
  for (Param* p : params) restore(data, *param_entries[p->name], p->data);
  if (restore_optimizer) {
    for (const optim::NamedTensor& s : optimizer->state())
      restore(data, *state_entries[s.name], s.tensor);
    optimizer->set_step_count(info.optimizer.value("step_count", info.step));
  }
  return info;
}

CheckpointContents load_checkpoint_tensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Layout layout = read_layout(path, in);
  std::vector<char> data(static_cast<size_t>(layout.data_bytes));
  in.seekg(layout.data_start);
  in.read(data.data(), layout.data_bytes);
  if (!in) throw error(path, "could not be read to the end");
  CheckpointContents contents;
  for (const CheckpointEntry& e : layout.info.tensors) {
    if (e.kind != "param" && e.kind != "optimizer_state")
      throw error(path, fmt::format("has tensor '{}' of unknown kind '{}'", e.name, e.kind));
    CheckpointTensor t{e.name, e.kind, e.shape,
                       std::vector<float>(static_cast<size_t>(e.length / 4))};
    std::memcpy(t.values.data(), data.data() + e.offset, static_cast<size_t>(e.length));
    contents.tensors.push_back(std::move(t));
  }
  contents.info = std::move(layout.info);
  return contents;
}

}  // namespace mgpu
