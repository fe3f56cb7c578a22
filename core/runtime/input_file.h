// Files the user names for reading (--model, --data, --profile, --resume, `plan --model`, viz's
// traces): checked for type and size before a byte is read, so a fifo never blocks, /dev/zero or a
// sparse 20 GB file never fills memory, and a folder is one line instead of a library message.
// One limit per kind of file, stated in the message and in the README.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace mgpu {

// The largest file of each kind the tool reads.
inline constexpr int64_t kMaxModelFileBytes = int64_t{1} << 20;    // --model JSON: 1 MiB
inline constexpr int64_t kMaxProfileFileBytes = int64_t{1} << 20;  // --profile JSON: 1 MiB
inline constexpr int64_t kMaxDataFileBytes = int64_t{256} << 20;   // --data text: 256 MiB
inline constexpr int64_t kMaxTraceFileBytes = int64_t{512} << 20;  // viz traces: 512 MiB
inline constexpr int64_t kMaxCheckpointBytes = int64_t{64} << 30;  // --resume: 64 GiB

// "a folder", "a fifo", "a character device", ...: what a path names instead of a file.
const char* file_type_name(std::filesystem::file_type type);

// What a message may echo of the user's input: at most `max` characters, control characters
// (a newline would split the one-line message) shown as '?', "..." when cut.
std::string echo_input(const std::string& text, size_t max = 200);

// Throws std::invalid_argument unless `path` is a non-empty name of at most 4096 characters
// (PATH_MAX); shared by the input and output checks.
void check_path_name(const std::string& path, const std::string& option);

// Throws std::invalid_argument with one line ("--data 'x' is a fifo, not a regular file: ...")
// unless `path` names a regular file (after symlinks) of at most `max_bytes` that this process may
// read. `option` names what the user typed (e.g. "--data").
void check_input_file(const std::string& path, const std::string& option, int64_t max_bytes);

// Checks `path` as above, then reads it whole. The file is opened without blocking and checked
// again through the open descriptor, so a file swapped for a fifo after the check cannot hang the
// read, and at most `max_bytes` are ever read whatever the file grows to.
std::string read_input_file(const std::string& path, const std::string& option, int64_t max_bytes);

}  // namespace mgpu
