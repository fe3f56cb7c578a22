// Output files the user names (--checkpoint, --trace, --screenshot): checked before a run spends
// any time, and written through a temporary file in the same folder that is renamed into place,
// so an interrupted write never leaves half a file under the real name and a device node, folder
// or fifo the user named by mistake is never replaced.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

namespace mgpu {

// Throws std::invalid_argument with one line ("--checkpoint '/dev/full' is a character device,
// not a regular file: ...") unless `path` is a regular file or nothing, in a folder that exists
// and can be written. `option` names what the user typed.
void check_output_path(const std::string& path, const std::string& option);

// Checks `path` as above, then calls write(file) on a temporary file next to it and renames it
// over `path` when write returns and every byte reached the disk. On any failure the temporary
// file is removed and std::invalid_argument says why (disk full, permission, ...).
void write_file_atomically(const std::string& path, const std::string& option,
                           const std::function<void(std::FILE*)>& write);

}  // namespace mgpu
