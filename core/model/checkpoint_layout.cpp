// Reading a checkpoint's header: the safetensors framing, each tensor's entry, and the check that
// the entries tile the data section exactly. Every field is checked before it is used.
#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/model/checkpoint.h"
#include "core/model/checkpoint_internal.h"

namespace mgpu {

using checkpoint_detail::check_header_start;
using checkpoint_detail::error;
using checkpoint_detail::Layout;
using checkpoint_detail::read_metadata;
using nlohmann::json;

namespace {

// An integer JSON value (not 1.5, not a string, not beyond int64).
int64_t get_int(const std::string& path, const json& j, const std::string& what) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw error(path, fmt::format("has a corrupt header: {} is too large", what));
    return static_cast<int64_t>(v);
  }
  if (!j.is_number_integer())
    throw error(path, fmt::format("has a corrupt header: {} is not an integer", what));
  return j.get<int64_t>();
}

Shape get_shape(const std::string& path, const json& j, const std::string& name) {
  if (!j.is_array() || j.size() > static_cast<size_t>(kCheckpointMaxRank))
    throw error(path, fmt::format("has a corrupt header: tensor '{}' has no shape of at most {} "
                                  "dimensions",
                                  name, kCheckpointMaxRank));
  Shape shape;
  for (const json& d : j) {
    const int64_t n = get_int(path, d, fmt::format("a dimension of tensor '{}'", name));
    if (n < 0 || n > (int64_t{1} << 40))
      throw error(path, fmt::format("has a corrupt header: tensor '{}' has dimension {}", name, n));
    shape.push_back(n);
  }
  return shape;
}

// Elements in `shape`, or -1 when they would not fit in `limit` (no overflow on hostile shapes).
int64_t checked_numel(const Shape& shape, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > limit / d) return -1;
    n *= d;
  }
  return n;
}

// The checks both formats share: dtype, shape vs length, alignment, inside the data, unique
// names, known kinds, and the tensors tile the data section exactly (no gap, no overlap).
void validate_entries(const std::string& path, std::vector<CheckpointEntry>& entries,
                      int64_t data_bytes) {
  std::set<std::string> names;
  for (const CheckpointEntry& e : entries) {
    if (e.name.empty()) throw error(path, "has a corrupt header: a tensor has an empty name");
    if (!names.insert(e.name).second)
      throw error(path, fmt::format("has a corrupt header: tensor '{}' appears twice", e.name));
    if (e.kind != "param" && e.kind != "optimizer_state")
      throw error(path, fmt::format("has tensor '{}' of unknown kind '{}' (expected param or "
                                    "optimizer_state)",
                                    e.name, e.kind));
    if (e.dtype != "f32")
      throw error(path, fmt::format("has tensor '{}' of dtype '{}'; only F32 is supported", e.name,
                                    e.dtype));
    const int64_t numel = checked_numel(e.shape, data_bytes / 4);
    if (numel < 0)
      throw error(path, fmt::format("has a corrupt header: tensor '{}' {} is larger than the file",
                                    e.name, shape_str(e.shape)));
    if (e.length != numel * 4)
      throw error(path, fmt::format("has a corrupt header: tensor '{}' {} spans {} bytes, not {}",
                                    e.name, shape_str(e.shape), e.length, numel * 4));
    if (e.offset < 0 || e.offset % 4 != 0)
      throw error(path, fmt::format("has a corrupt header: tensor '{}' starts at byte {}, not a "
                                    "multiple of 4",
                                    e.name, e.offset));
    if (e.offset > data_bytes - e.length)
      throw error(path, fmt::format("is truncated: tensor '{}' needs data bytes [{}, {}) but the "
                                    "file holds only {}",
                                    e.name, e.offset, e.offset + e.length, data_bytes));
  }
  std::stable_sort(
      entries.begin(), entries.end(),
      [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.offset < b.offset; });
  int64_t expected = 0;
  for (const CheckpointEntry& e : entries) {
    if (e.offset < expected)
      throw error(path, fmt::format("has a corrupt header: tensor '{}' overlaps the one before it "
                                    "(starts at byte {}, before {})",
                                    e.name, e.offset, expected));
    if (e.offset > expected)
      throw error(path, fmt::format("has a corrupt header: a gap of {} bytes before tensor '{}'",
                                    e.offset - expected, e.name));
    expected += e.length;
  }
  if (expected != data_bytes)
    throw error(path, fmt::format("has {} bytes after the last tensor (the header describes {} of "
                                  "{} data bytes)",
                                  data_bytes - expected, expected, data_bytes));
}

uint64_t read_u64(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

// JSON that rejects duplicate keys in the top-level object (nlohmann would keep the last one).
json parse_unique_keys(const std::string& path, const std::string& text) {
  std::set<std::string> keys;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 &&
        !keys.insert(parsed.get<std::string>()).second)
      throw error(path, fmt::format("has a corrupt header: tensor '{}' appears twice",
                                    parsed.get<std::string>()));
    return true;
  };
  return json::parse(text, callback);
}

Layout parse_safetensors(const std::string& path, const std::string& bytes) {
  if (bytes.size() < 9) throw error(path, "is not an mgpu checkpoint (not a safetensors file)");
  check_header_start(path, bytes.data(), bytes.size());
  const uint64_t header_len = read_u64(bytes, 0);
  Layout layout;
  layout.data_start = 8 + static_cast<int64_t>(header_len);
  layout.data_bytes = static_cast<int64_t>(bytes.size()) - layout.data_start;
  CheckpointInfo& info = layout.info;
  info.version = kCheckpointVersion;
  json h;
  try {
    h = parse_unique_keys(path, bytes.substr(8, header_len));
  } catch (const json::exception& ex) {
    throw error(path, fmt::format("has a corrupt header: {}", ex.what()));
  }
  if (!h.is_object()) throw error(path, "has a corrupt header: it is not a JSON object");
  if (!h.contains("__metadata__") || !h["__metadata__"].is_object())
    throw error(path, "is a safetensors file but not an mgpu checkpoint (no __metadata__)");
  const json& meta = h["__metadata__"];
  const json kinds = read_metadata(path, bytes, 8 + header_len, meta, layout);
  if (!kinds.is_object())
    throw error(path, "has a corrupt header: __metadata__.kinds is not an object");

  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__") continue;
    if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !t.contains("shape") ||
        !t.contains("data_offsets") || !t["data_offsets"].is_array() ||
        t["data_offsets"].size() != 2)
      throw error(path, fmt::format("has a corrupt header: tensor '{}' needs dtype, shape and "
                                    "data_offsets [begin, end]",
                                    name));
    CheckpointEntry e;
    e.name = name;
    if (!kinds.contains(name) || !kinds[name].is_string())
      throw error(path, fmt::format("has a corrupt header: tensor '{}' has no kind", name));
    e.kind = kinds[name].get<std::string>();
    const std::string dtype = t["dtype"].get<std::string>();
    e.dtype = dtype == "F32" ? "f32" : dtype;
    e.shape = get_shape(path, t["shape"], name);
    const int64_t begin = get_int(path, t["data_offsets"][0], fmt::format("'{}' begin", name));
    const int64_t end = get_int(path, t["data_offsets"][1], fmt::format("'{}' end", name));
    if (end < begin)
      throw error(path,
                  fmt::format("has a corrupt header: tensor '{}' ends before it begins", name));
    e.offset = begin;
    e.length = end - begin;
    info.tensors.push_back(std::move(e));
  }
  if (kinds.size() != info.tensors.size())
    throw error(path, "has a corrupt header: __metadata__.kinds names tensors the file lacks");
  return layout;
}

}  // namespace

namespace checkpoint_detail {

int64_t get_step(const std::string& path, const json& j, const std::string& what) {
  const int64_t step = get_int(path, j, what);
  if (step < 0 || step > kCheckpointMaxStep)
    throw error(path, fmt::format("has a corrupt header: {} {} is outside [0, 2^40]", what, step));
  return step;
}

// The first 9 bytes of a file of `size` bytes: the header's length and its opening brace.
void check_header_start(const std::string& path, const char* first9, uint64_t size) {
  uint64_t header_len = 0;
  std::memcpy(&header_len, first9, sizeof header_len);
  const uint64_t after = size - 8;
  if (header_len > after)
    throw error(path, fmt::format("is not an mgpu checkpoint (or is truncated): its first 8 bytes "
                                  "give a {}-byte header but only {} bytes follow",
                                  header_len, after));
  if (header_len < 2 || header_len > static_cast<uint64_t>(kCheckpointMaxHeaderBytes) ||
      first9[8] != '{')
    throw error(path, "is not an mgpu checkpoint (not a safetensors file)");
}

Layout parse_layout(const std::string& path, const std::string& bytes) {
  if (bytes.size() < 8)
    throw error(path,
                fmt::format("is truncated: {} bytes, too short for any checkpoint", bytes.size()));
  if (std::memcmp(bytes.data(), kCheckpointMagic, 8) == 0)
    throw error(path, fmt::format("is an MGPUCKPT file (format version 1), which carries no "
                                  "checksum; this build reads version {} only: train again with "
                                  "--checkpoint to write one",
                                  kCheckpointVersion));
  Layout layout = parse_safetensors(path, bytes);
  validate_entries(path, layout.info.tensors, layout.data_bytes);
  return layout;
}

}  // namespace checkpoint_detail

}  // namespace mgpu
