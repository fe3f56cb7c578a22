#include "core/runtime/output_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/runtime/input_file.h"

namespace mgpu {

namespace fs = std::filesystem;

namespace {

std::invalid_argument bad_output(const std::string& option, const std::string& path,
                                 const std::string& what) {
  return std::invalid_argument(fmt::format("{} '{}' {}", option, path, what));
}

// The folder a new file at `path` goes into ("." for a bare name).
fs::path folder_of(const fs::path& path) {
  fs::path dir = path.parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

// Removes the temporary file unless released (after the rename).
struct TempFile {
  std::string path;
  ~TempFile() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// The file a write to `path` lands in: a symlink's target (the link is kept), else `path`.
// A link that loops is refused; a dangling one names a file to create where it points.
fs::path written_file(const std::string& path, const std::string& option,
                      const std::string& shown) {
  constexpr int kMaxLinks = 40;  // as the kernel's own limit (ELOOP)
  std::error_code ec;
  fs::path target = path;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    if (hops == kMaxLinks)
      throw bad_output(option, shown, "is a symbolic link that loops: name a file instead");
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) throw bad_output(option, shown, fmt::format("cannot be resolved: {}", ec.message()));
    target = next.is_absolute() ? next : folder_of(target) / next;
  }
  return target;
}

// Creates the temporary file next to `target` that a write goes through; its name in `name`.
// Returns its descriptor, or -1 with errno set.
int open_temp(const fs::path& target, std::string& name) {
  name = (folder_of(target) / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  return ::mkstemp(name.data());  // fills in the XXXXXX of `name`
}

// Creates (and removes) the temporary file a write would use: whatever would stop the write
// (a kernel filesystem such as /proc or /sys, a read-only mount, a name over the filesystem's
// limit) stops the check instead, before any work.
void probe_write(const fs::path& target, const std::string& option, const std::string& shown) {
  std::string name;
  const int fd = open_temp(target, name);
  if (fd < 0)
    throw bad_output(option, shown,
                     fmt::format("cannot be written in folder '{}': {}",
                                 folder_of(target).string().substr(0, 80), std::strerror(errno)));
  ::close(fd);
  ::unlink(name.c_str());
}

}  // namespace

void check_output_path(const std::string& path, const std::string& option) {
  // Shown paths are cut short: a 100k-character name must not flood the terminal.
  const std::string shown = echo_input(path, 80);
  check_path_name(path, option);
  std::error_code ec;
  const fs::file_status st =
      fs::status(path, ec);  // follows symlinks: the file written is the target
  if (fs::exists(st)) {
    if (st.type() != fs::file_type::regular)
      throw bad_output(option, shown,
                       fmt::format("is {}, not a regular file: name a new file or an existing one",
                                   file_type_name(st.type())));
    if (::access(path.c_str(), W_OK) != 0)
      throw bad_output(option, shown, fmt::format("cannot be written: {}", std::strerror(errno)));
  }
  const fs::path target = written_file(path, option, shown);
  const fs::path dir = folder_of(target);
  const fs::file_status dst = fs::status(dir, ec);
  if (!fs::exists(dst))
    throw bad_output(
        option, shown,
        fmt::format("cannot be created: folder '{}' does not exist", dir.string().substr(0, 80)));
  if (dst.type() != fs::file_type::directory)
    throw bad_output(
        option, shown,
        fmt::format("cannot be created: '{}' is not a folder", dir.string().substr(0, 80)));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw bad_output(option, shown,
                     fmt::format("cannot be created in folder '{}': {}", dir.string().substr(0, 80),
                                 std::strerror(errno)));
  probe_write(target, option, shown);
}

void write_file_atomically(const std::string& path, const std::string& option,
                           const std::function<void(std::FILE*)>& write) {
  check_output_path(path, option);
  const std::string shown = echo_input(path, 80);
  // A symlink to a regular file: write the file it points to, keep the link.
  std::error_code ec;
  const fs::path target = written_file(path, option, shown);
  std::string name;
  const int fd = open_temp(target, name);
  if (fd < 0)
    throw bad_output(option, shown, fmt::format("cannot be written: {}", std::strerror(errno)));
  TempFile tmp{name};
  ::fchmod(fd, 0644);  // mkstemp makes 0600; an output file is as readable as any other
  std::FILE* file = ::fdopen(fd, "wb");
  if (!file) {
    ::close(fd);
    throw bad_output(option, shown, fmt::format("cannot be written: {}", std::strerror(errno)));
  }
  try {
    write(file);
  } catch (...) {
    std::fclose(file);
    throw;
  }
  errno = 0;
  bool ok = std::fflush(file) == 0 && !std::ferror(file) && ::fsync(fd) == 0;
  const int write_errno = errno;
  ok = (std::fclose(file) == 0) && ok;
  if (!ok)
    throw bad_output(
        option, shown,
        fmt::format("cannot be written: {}", std::strerror(write_errno ? write_errno : errno)));
  // Rename only over a regular file or nothing (the target may have changed since the check).
  const fs::file_status now = fs::symlink_status(target, ec);
  if (fs::exists(now) && now.type() != fs::file_type::regular)
    throw bad_output(
        option, shown,
        fmt::format("is {}, not a regular file: nothing was replaced", file_type_name(now.type())));
  if (std::rename(tmp.path.c_str(), target.c_str()) != 0)
    throw bad_output(option, shown, fmt::format("cannot be written: {}", std::strerror(errno)));
  tmp.path.clear();
}

}  // namespace mgpu
