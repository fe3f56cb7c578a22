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

#include "core/model/checkpoint_internal.h"
#include "core/optim/optimizer.h"
#include "core/runtime/output_file.h"

namespace mgpu {

// The data section is the host's float bytes as they are; the format says little-endian.
static_assert(std::endian::native == std::endian::little,
              "checkpoints assume a little-endian host");

namespace checkpoint_detail {

// A checkpoint is a file the user named, so its problems are bad input (std::invalid_argument:
// the program reports them in one line with exit code 2).
std::invalid_argument error(const std::string& path, const std::string& what) {
  return std::invalid_argument(fmt::format("checkpoint '{}' {}", path, what));
}

}  // namespace checkpoint_detail

using checkpoint_detail::check_header_start;
using checkpoint_detail::contents_of;
using checkpoint_detail::error;
using checkpoint_detail::parse_layout;
using nlohmann::json;

namespace {

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
