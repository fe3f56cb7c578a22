// A checkpoint's data section: the whole file's checksum, finite values, optimizer state named and
// sized after its parameters, then the bytes cut into tensors.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include "core/model/checkpoint.h"
#include "core/model/checkpoint_internal.h"

namespace mgpu {

using checkpoint_detail::crc32_of;
using checkpoint_detail::error;
using checkpoint_detail::Layout;

namespace {

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

}  // namespace

namespace checkpoint_detail {

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

}  // namespace checkpoint_detail

}  // namespace mgpu
