#include "core/runtime/input_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace mgpu {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxPathChars = 4096;  // PATH_MAX on Linux

// "256 MiB", "64 GiB": the limits are whole powers of two.
std::string limit_text(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30) && bytes % (int64_t{1} << 30) == 0)
    return fmt::format("{} GiB", bytes >> 30);
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0)
    return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} bytes", bytes);
}

std::invalid_argument bad_input(const std::string& option, const std::string& path,
                                const std::string& what) {
  return std::invalid_argument(fmt::format("{} '{}' {}", option, echo_input(path, 120), what));
}

std::invalid_argument not_regular(const std::string& option, const std::string& path,
                                  fs::file_type type) {
  return bad_input(
      option, path,
      fmt::format("is {}, not a regular file: name a file to read", file_type_name(type)));
}

std::invalid_argument too_big(const std::string& option, const std::string& path, int64_t size,
                              int64_t max_bytes) {
  return bad_input(option, path,
                   fmt::format("is {} bytes, above the limit of {}", size, limit_text(max_bytes)));
}

fs::file_type type_of(mode_t mode) {
  if (S_ISDIR(mode)) return fs::file_type::directory;
  if (S_ISFIFO(mode)) return fs::file_type::fifo;
  if (S_ISCHR(mode)) return fs::file_type::character;
  if (S_ISBLK(mode)) return fs::file_type::block;
  if (S_ISSOCK(mode)) return fs::file_type::socket;
  return fs::file_type::unknown;
}

// Closes the descriptor on every path out.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

const char* file_type_name(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory:
      return "a folder";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::fifo:
      return "a fifo";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::symlink:
      return "a symbolic link";
    default:
      return "a special file";
  }
}

std::string echo_input(const std::string& text, size_t max) {
  std::string shown = text.size() > max ? text.substr(0, max > 3 ? max - 3 : 0) + "..." : text;
  for (char& ch : shown)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return shown;
}

void check_path_name(const std::string& path, const std::string& option) {
  if (path.empty()) throw std::invalid_argument(fmt::format("{} needs a file name", option));
  if (path.size() > kMaxPathChars)
    throw bad_input(
        option, path,
        fmt::format("is {} characters long; paths are limited to {}", path.size(), kMaxPathChars));
}

void check_input_file(const std::string& path, const std::string& option, int64_t max_bytes) {
  check_path_name(path, option);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // follows symlinks: the file read is the target
  if (!fs::exists(st))
    throw bad_input(option, path,
                    ec && ec != std::errc::no_such_file_or_directory
                        ? fmt::format("cannot be read: {}", ec.message())
                        : std::string("does not exist"));
  if (st.type() != fs::file_type::regular) throw not_regular(option, path, st.type());
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw bad_input(option, path, fmt::format("cannot be read: {}", ec.message()));
  if (size > static_cast<uintmax_t>(max_bytes))
    throw too_big(option, path, static_cast<int64_t>(size), max_bytes);
  if (::access(path.c_str(), R_OK) != 0)
    throw bad_input(option, path, fmt::format("cannot be read: {}", std::strerror(errno)));
}

std::string read_input_file(const std::string& path, const std::string& option, int64_t max_bytes) {
  check_input_file(path, option, max_bytes);
  // O_NONBLOCK: opening a fifo swapped in since the check returns at once instead of waiting
  // for a writer; fstat then refuses it.
  Descriptor file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0)
    throw bad_input(option, path, fmt::format("cannot be read: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0)
    throw bad_input(option, path, fmt::format("cannot be read: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw not_regular(option, path, type_of(st.st_mode));
  if (st.st_size > max_bytes) throw too_big(option, path, st.st_size, max_bytes);
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t used = 0;
  while (used < bytes.size()) {  // a file that shrank since fstat just ends early
    const ssize_t n = ::read(file.fd, bytes.data() + used, bytes.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw bad_input(option, path, fmt::format("cannot be read: {}", std::strerror(errno)));
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  bytes.resize(used);
  return bytes;
}

}  // namespace mgpu
