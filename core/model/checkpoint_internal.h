// Internal to the checkpoint reader and writer (core/model/checkpoint*.cpp): the error every
// problem with a file becomes, the parsed header, and the steps of reading that files share.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "core/model/checkpoint.h"

namespace mgpu::checkpoint_detail {

using nlohmann::json;

inline constexpr const char* kFormatName = "mgpu-checkpoint";

// One line naming the file and the problem (checkpoint.cpp).
std::invalid_argument error(const std::string& path, const std::string& what);

// CRC32 of `bytes` at `data`, continuing from `crc` (checkpoint_write.cpp).
uint32_t crc32_of(uint32_t crc, const void* data, size_t bytes);

// The parsed header plus where the data section starts and how long it is.
struct Layout {
  CheckpointInfo info;
  int64_t data_start = 0;
  int64_t data_bytes = 0;
  uint32_t crc = 0;   // the header's checksum
  size_t crc_at = 0;  // where its 8 hex digits sit in the file (read as "00000000")
};

// An integer JSON value in [0, 2^40] (checkpoint_layout.cpp).
int64_t get_step(const std::string& path, const json& j, const std::string& what);

// The first 9 bytes of a file of `size` bytes: the header's length and its opening brace
// (checkpoint_layout.cpp).
void check_header_start(const std::string& path, const char* first9, uint64_t size);

// The header parsed and every entry checked against the file's size (checkpoint_layout.cpp).
Layout parse_layout(const std::string& path, const std::string& bytes);

// mgpu's fields of __metadata__ into layout.info (and the checksum into layout); returns the
// tensors' kinds (checkpoint_metadata.cpp).
json read_metadata(const std::string& path, const std::string& bytes, size_t header_end,
                   const json& meta, Layout& layout);

// The data section checked (checksum, finite values) and cut into tensors (checkpoint_data.cpp).
CheckpointContents contents_of(const std::string& path, const std::string& bytes, Layout layout);

}  // namespace mgpu::checkpoint_detail
