#include "core/model/checkpoint.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <zlib.h>

#include "core/optim/optimizer.h"
#include "core/runtime/output_file.h"

namespace mgpu {

// The data section is the host's float bytes as they are; the format says little-endian.
static_assert(std::endian::native == std::endian::little,
              "checkpoints assume a little-endian host");

namespace {

using nlohmann::json;

constexpr const char* kFormatName = "mgpu-checkpoint";

// A checkpoint is a file the user named, so its problems are bad input (std::invalid_argument:
// the program reports them in one line with exit code 2).
std::invalid_argument error(const std::string& path, const std::string& what) {
  return std::invalid_argument(fmt::format("checkpoint '{}' {}", path, what));
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

// What the header needs besides the tensors.
struct HeaderFields {
  int64_t step = 0;
  json config;
  json optimizer;
  json model;  // the model's shape options ({"layers": 2, "heads": 4, ...}) or null
};

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

// ---------------------------------------------------------------------------------------------
// Reading: every field is checked before it is used
// ---------------------------------------------------------------------------------------------

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

int64_t get_step(const std::string& path, const json& j, const std::string& what) {
  const int64_t step = get_int(path, j, what);
  if (step < 0 || step > kCheckpointMaxStep)
    throw error(path, fmt::format("has a corrupt header: {} {} is outside [0, 2^40]", what, step));
  return step;
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

// The parsed header plus where the data section starts and how long it is.
struct Layout {
  CheckpointInfo info;
  int64_t data_start = 0;
  int64_t data_bytes = 0;
  uint32_t crc = 0;   // the header's checksum
  size_t crc_at = 0;  // where its 8 hex digits sit in the file (read as "00000000")
};

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

std::string meta_string(const std::string& path, const json& meta, const std::string& key) {
  if (!meta.contains(key) || !meta[key].is_string())
    throw error(path, fmt::format("has a corrupt header: __metadata__ has no string '{}'", key));
  return meta[key].get<std::string>();
}

json meta_json(const std::string& path, const json& meta, const std::string& key) {
  try {
    return json::parse(meta_string(path, meta, key));
  } catch (const json::exception&) {
    throw error(path, fmt::format("has a corrupt header: __metadata__.{} is not JSON", key));
  }
}

// The optimizer entry's hyper-parameters: the numeric ones numbers, any other a string (e.g.
// mixed precision's "master_weights": "fp32").
void check_hyperparameters(const std::string& path, const json& optimizer) {
  static const std::set<std::string> numeric = {"lr",    "weight_decay", "momentum",
                                                "beta1", "beta2",        "eps"};
  for (const auto& [key, value] : optimizer.items()) {
    if (key == "name" || key == "step_count" || key == "loss_scaler") continue;
    const bool number = numeric.count(key) > 0;
    if (number ? !value.is_number() : !(value.is_number() || value.is_string()))
      throw error(path, fmt::format("has a corrupt header: the optimizer's field '{}' is not a {}",
                                    key.substr(0, 40), number ? "number" : "number or string"));
  }
}

// The fp16 loss scaler's state: {"scale" > 0, "good_steps" >= 0, "skipped_steps" in [0, step]}.
void check_loss_scaler(const std::string& path, const json& scaler, int64_t step) {
  if (!scaler.is_object() || !scaler.contains("scale") || !scaler["scale"].is_number() ||
      !(scaler["scale"].get<double>() > 0) || !scaler.contains("good_steps"))
    throw error(path,
                "has a corrupt header: the loss scaler's state needs a number 'scale' > 0 "
                "and an integer 'good_steps'");
  get_step(path, scaler["good_steps"], "the loss scaler's good_steps");
  if (scaler.contains("skipped_steps") &&
      get_step(path, scaler["skipped_steps"], "the loss scaler's skipped_steps") > step)
    throw error(path, fmt::format("has a corrupt header: the loss scaler skipped {} steps of {}",
                                  scaler["skipped_steps"].get<int64_t>(), step));
}

// The optimizer entry, null (parameters only) or its hyper-parameters, each of the type it is:
// a name, numbers, a step count no larger than the step (skipped fp16 steps make it smaller).
void check_optimizer(const std::string& path, const json& optimizer, int64_t step) {
  if (optimizer.is_null()) return;
  if (!optimizer.is_object())
    throw error(path, "has a corrupt header: the optimizer entry is not an object");
  if (!optimizer.contains("name") || !optimizer["name"].is_string())
    throw error(path, "has a corrupt header: the optimizer entry has no name");
  check_hyperparameters(path, optimizer);
  if (optimizer.contains("step_count")) {
    const int64_t count = get_step(path, optimizer["step_count"], "the optimizer's step count");
    if (count > step)
      throw error(path, fmt::format("has a corrupt header: the optimizer's step count {} is more "
                                    "than the {} steps trained",
                                    count, step));
  }
  if (optimizer.contains("loss_scaler")) check_loss_scaler(path, optimizer["loss_scaler"], step);
}

// Where the checksum's digits sit: the one `"crc32":"<digits>"` in the header text.
size_t checksum_position(const std::string& path, const std::string& bytes, size_t header_end,
                         const std::string& digits) {
  const std::string token = "\"crc32\":\"" + digits + "\"";
  const size_t at = bytes.find(token, 8);
  if (at == std::string::npos || at + token.size() > header_end ||
      bytes.find("\"crc32\"", 8) != at || bytes.find("\"crc32\"", at + 1) < header_end)
    throw error(path,
                "has a corrupt header: __metadata__.crc32 is not written once as "
                "\"crc32\":\"<8 hex digits>\"");
  return at + token.size() - 1 - digits.size();
}

// mgpu's fields of __metadata__ into layout.info (and the checksum into layout); returns the
// tensors' kinds.
json read_metadata(const std::string& path, const std::string& bytes, size_t header_end,
                   const json& meta, Layout& layout) {
  const std::string format = meta_string(path, meta, "format");
  if (format != kFormatName)
    throw error(path, fmt::format("is a safetensors file but not an mgpu checkpoint "
                                  "(__metadata__.format is '{}', expected '{}')",
                                  format.substr(0, 40), kFormatName));
  const std::string version = meta_string(path, meta, "version");
  if (version == "2")
    throw error(path, fmt::format("has format version 2, whose checksum does not cover its "
                                  "header; this build reads version {} only: train again with "
                                  "--checkpoint to write one",
                                  kCheckpointVersion));
  if (version != std::to_string(kCheckpointVersion))
    throw error(path, fmt::format("has format version {}; this build reads version {}",
                                  version.substr(0, 20), kCheckpointVersion));
  const json step = meta_json(path, meta, "step");
  layout.info.step = get_step(path, step, "step");
  layout.info.config = meta_json(path, meta, "config");
  layout.info.optimizer = meta_json(path, meta, "optimizer");
  check_optimizer(path, layout.info.optimizer, layout.info.step);
  layout.info.model = meta_json(path, meta, "model");
  if (!layout.info.model.is_null() && !layout.info.model.is_object())
    throw error(path, "has a corrupt header: __metadata__.model is not an object");
  layout.info.precision = meta_string(path, meta, "precision");
  const std::string crc = meta_string(path, meta, "crc32");
  if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw error(path, "has a corrupt header: __metadata__.crc32 is not 8 hex digits");
  layout.crc = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
  layout.crc_at = checksum_position(path, bytes, header_end, crc);
  return meta_json(path, meta, "kinds");
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

std::string read_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st))
    throw error(path, "cannot be opened: No such file or directory");
  if (!std::filesystem::is_regular_file(st)) throw error(path, "is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error(path, fmt::format("cannot be opened: {}", std::strerror(errno)));
  // The first bytes decide whether the file can be a checkpoint at all: 20 GiB of zeros is
  // refused from its first 9 bytes, not read whole first.
  const auto size = std::filesystem::file_size(path, ec);
  char first9[9] = {};
  if (!ec && size >= 9 && in.read(first9, 9) &&
      std::memcmp(first9, kCheckpointMagic, 8) != 0)  // the old format: parse_layout says so
    check_header_start(path, first9, size);
  in.clear();
  in.seekg(0);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw error(path, "could not be read to the end");
  return bytes;
}

// The whole file's CRC32 with the checksum's own 8 digits read as "00000000".
uint32_t file_checksum(const std::string& bytes, size_t crc_at) {
  uint32_t crc = crc32_of(static_cast<uint32_t>(::crc32(0, nullptr, 0)), bytes.data(), crc_at);
  crc = crc32_of(crc, "00000000", 8);
  return crc32_of(crc, bytes.data() + crc_at + 8, bytes.size() - crc_at - 8);
}

// The optimizer state's names and values, for what they are: "<optimizer>.<buffer>.<param>" of
// a parameter in the file and of its size, every parameter in each buffer, none without an
// optimizer, and Adam's second moment (a mean of squares) never negative.
void check_optimizer_state(const std::string& path, const CheckpointContents& c) {
  std::map<std::string, int64_t> params;  // name -> elements
  for (const CheckpointTensor& t : c.tensors)
    if (t.kind == "param") params[t.name] = static_cast<int64_t>(t.values.size());
  const std::string optimizer =
      c.info.optimizer.is_object() ? c.info.optimizer["name"].get<std::string>() : "";
  std::map<std::string, size_t> per_buffer;
  for (const CheckpointTensor& t : c.tensors) {
    if (t.kind != "optimizer_state") continue;
    if (optimizer.empty())
      throw error(path, fmt::format("holds optimizer state '{}' but no optimizer entry", t.name));
    const std::string prefix = optimizer + ".";
    const size_t dot = t.name.find('.', prefix.size());
    const std::string param = dot == std::string::npos ? "" : t.name.substr(dot + 1);
    if (t.name.rfind(prefix, 0) != 0 || !params.count(param))
      throw error(path, fmt::format("holds optimizer state '{}', not named "
                                    "'{}.<buffer>.<parameter>' after one of its parameters",
                                    t.name, optimizer));
    if (static_cast<int64_t>(t.values.size()) != params[param])
      throw error(path, fmt::format("holds optimizer state '{}' of {} values for parameter '{}' "
                                    "of {}",
                                    t.name, t.values.size(), param, params[param]));
    const std::string buffer = t.name.substr(prefix.size(), dot - prefix.size());
    ++per_buffer[buffer];
    if (optimizer == "adamw" && buffer == "v")
      for (size_t i = 0; i < t.values.size(); ++i)
        if (t.values[i] < 0)
          throw error(path, fmt::format("holds a negative second moment ({}) in '{}' at element "
                                        "{}: Adam's v is a mean of squares, never negative",
                                        t.values[i], t.name, i));
  }
  for (const auto& [buffer, count] : per_buffer)
    if (count != params.size())
      throw error(path, fmt::format("holds {}.{} state for {} of its {} parameters", optimizer,
                                    buffer, count, params.size()));
}

// The data section checked (checksum, finite values) and cut into tensors.
CheckpointContents contents_of(const std::string& path, const std::string& bytes, Layout layout) {
  const uint32_t crc = file_checksum(bytes, layout.crc_at);
  if (crc != layout.crc)
    throw error(path, fmt::format("is corrupt: the file's CRC32 is {:08x} but its header says "
                                  "{:08x} (the header or the data was changed after it was "
                                  "written)",
                                  crc, layout.crc));
  const char* data = bytes.data() + layout.data_start;
  CheckpointContents contents;
  for (const CheckpointEntry& e : layout.info.tensors) {
    CheckpointTensor t{e.name, e.kind, e.shape,
                       std::vector<float>(static_cast<size_t>(e.length / 4))};
    if (e.length > 0) std::memcpy(t.values.data(), data + e.offset, static_cast<size_t>(e.length));
    for (size_t i = 0; i < t.values.size(); ++i)
      if (!std::isfinite(t.values[i]))
        throw error(path, fmt::format("holds a non-finite value ({}) in tensor '{}' at element {}",
                                      t.values[i], e.name, i));
    contents.tensors.push_back(std::move(t));
  }
  contents.info = std::move(layout.info);
  check_optimizer_state(path, contents);
  return contents;
}

// Finds the tensor for each name in `names`; checks nothing is missing or extra of this kind.
std::map<std::string, const CheckpointTensor*> match_tensors(const std::string& path,
                                                             const CheckpointContents& c,
                                                             const std::string& kind,
                                                             const std::vector<std::string>& names,
                                                             const std::string& owner) {
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const CheckpointTensor& t : c.tensors)
    if (t.kind == kind) by_name[t.name] = &t;
  for (const std::string& n : names)
    if (!by_name.count(n))
      throw error(path, fmt::format("has no tensor '{}' but the {} expects one", n, owner));
  if (by_name.size() != names.size()) {
    for (auto& [n, t] : by_name)
      if (std::find(names.begin(), names.end(), n) == names.end())
        throw error(path, fmt::format("has tensor '{}' that the {} does not have", n, owner));
  }
  return by_name;
}

void check_shape(const std::string& path, const CheckpointTensor& t, const Shape& expected,
                 const std::string& owner) {
  if (t.shape != expected)
    throw error(path, fmt::format("has {} {} but the {} expects {}", t.name, shape_str(t.shape),
                                  owner, shape_str(expected)));
}

void restore(const CheckpointTensor& t, Tensor dst) {
  if (dst.has_data()) dst.copy_from(Tensor::from(dst.shape(), t.values, MemCategory::workspace));
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

CheckpointInfo read_checkpoint_info(const std::string& path) {
  return parse_layout(path, read_file(path)).info;
}

CheckpointContents parse_checkpoint_bytes(const std::string& name, const std::string& bytes) {
  return contents_of(name, bytes, parse_layout(name, bytes));
}

CheckpointContents load_checkpoint_tensors(const std::string& path) {
  return parse_checkpoint_bytes(path, read_file(path));
}

CheckpointInfo load_checkpoint(const std::string& path, const ParamList& params,
                               optim::Optimizer* optimizer) {
  const CheckpointContents c = load_checkpoint_tensors(path);

  // 1. Validate everything against the model before touching it.
  std::vector<std::string> param_names;
  for (const Param* p : params) param_names.push_back(p->name);
  auto param_tensors = match_tensors(path, c, "param", param_names, "model");
  for (const Param* p : params)
    check_shape(path, *param_tensors[p->name], p->data.shape(), "model");

  const bool restore_optimizer = optimizer && !c.info.optimizer.is_null();
  std::map<std::string, const CheckpointTensor*> state_tensors;
  if (restore_optimizer) {
    const json& saved_opt = c.info.optimizer;
    std::string saved = saved_opt.contains("name") && saved_opt["name"].is_string()
                            ? saved_opt["name"].get<std::string>()
                            : "?";
    if (saved != optimizer->name())
      throw error(path, fmt::format("holds {} optimizer state but the optimizer is {}", saved,
                                    optimizer->name()));
    std::vector<std::string> state_names;
    for (const optim::NamedTensor& s : optimizer->state()) state_names.push_back(s.name);
    state_tensors = match_tensors(path, c, "optimizer_state", state_names, "optimizer");
    for (const optim::NamedTensor& s : optimizer->state())
      check_shape(path, *state_tensors[s.name], s.tensor.shape(), "optimizer");
  }

  // 2. Copy every tensor into place.
  for (Param* p : params) restore(*param_tensors[p->name], p->data);
  if (restore_optimizer) {
    for (const optim::NamedTensor& s : optimizer->state())
      restore(*state_tensors[s.name], s.tensor);
    optimizer->set_step_count(c.info.optimizer.contains("step_count")
                                  ? c.info.optimizer["step_count"].get<int64_t>()
                                  : c.info.step);
  }
  return c.info;
}

}  // namespace mgpu
