#include "core/model/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace mgpu {

// ---------------------------------------------------------------------------------- specs

PartitionSpec PartitionSpec::replicated(const Shape& full) {
  return {Kind::replicated, full, {{0, shape_numel(full)}}, false, -1};
}

PartitionSpec PartitionSpec::rows(const Shape& full,
                                  const std::vector<std::pair<int64_t, int64_t>>& row_ranges) {
  const int64_t per_row = full.size() >= 2 ? shape_numel(full) / full[0] : 1;
  PartitionSpec spec{Kind::split, full, {}, false, -1};
  for (const auto& [r0, r1] : row_ranges) spec.runs.push_back({r0 * per_row, (r1 - r0) * per_row});
  return spec;
}

PartitionSpec PartitionSpec::columns(const Shape& full, int64_t c0, int64_t c1) {
  if (full.size() != 2) throw std::logic_error("a column split needs a matrix");
  PartitionSpec spec{Kind::split, full, {}, false, -1};
  for (int64_t row = 0; row < full[0]; ++row) spec.runs.push_back({row * full[1] + c0, c1 - c0});
  return spec;
}

PartitionSpec PartitionSpec::chunk(int64_t lo, int64_t hi) const {
  PartitionSpec out{kind, full_shape, {}, /*flat_chunk=*/true, stage};
  int64_t pos = 0;  // the local position of the current run's first element
  for (const ShardRun& run : runs) {
    const int64_t a = std::max(lo, pos), b = std::min(hi, pos + run.length);
    if (a < b) out.runs.push_back({run.full_offset + (a - pos), b - a});
    pos += run.length;
  }
  return out;
}

int64_t PartitionSpec::local_numel() const {
  int64_t n = 0;
  for (const ShardRun& run : runs) n += run.length;
  return n;
}

Param Param::declared(std::string name, const Shape& shape, ParamInit init) {
  Param p;
  p.name = std::move(name);
  p.shape = shape;
  p.init = init;
  p.spec = PartitionSpec::replicated(shape);
  return p;
}

// ---------------------------------------------------------------------------------- values

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& name) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// The stream of one parameter: every element's draw is a hash of (this key, its index).
uint64_t param_key(uint64_t seed, const std::string& name) {
  return splitmix64(seed ^ splitmix64(name_hash(name)));
}

float value_at(uint64_t key, const ParamInit& init, int64_t index) {
  if (init.kind == ParamInit::Kind::constant) return init.value;
  const auto i = static_cast<uint64_t>(index);
  constexpr double kUnit = 1.0 / 9007199254740992.0;                                   // 2^-53
  const double u1 = static_cast<double>((splitmix64(key + 2 * i) >> 11) + 1) * kUnit;  // (0, 1]
  const double u2 = static_cast<double>(splitmix64(key + 2 * i + 1) >> 11) * kUnit;    // [0, 1)
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return static_cast<float>(z * init.value);
}

}  // namespace

float initial_value(uint64_t seed, const std::string& name, const ParamInit& init, int64_t index) {
  return value_at(param_key(seed, name), init, index);
}

void write_initial_values(const Param& p, uint64_t seed, int64_t lo, int64_t hi, Tensor dst) {
  if (dst.numel() != hi - lo)
    throw std::logic_error(
        fmt::format("init of {}: {} elements into a tensor of {}", p.name, hi - lo, dst.numel()));
  if (!dst.has_data()) return;  // phantom: no values (and no time spent drawing billions)
  const uint64_t key = param_key(seed, p.name);
  constexpr int64_t kBatch = int64_t{1} << 16;  // host values drawn at a time
  std::vector<float> values;
  int64_t pos = 0;     // local index of the current run's first element
  int64_t filled = 0;  // elements of dst written
  auto flush = [&] {
    if (values.empty()) return;
    const auto n = static_cast<int64_t>(values.size());
    store_host_values(dst.flat_range(filled, filled + n), values);
    filled += n;
    values.clear();
  };
  for (const ShardRun& run : p.spec.runs) {
    const int64_t a = std::max(lo, pos), b = std::min(hi, pos + run.length);
    for (int64_t j = a; j < b; ++j) {
      values.push_back(value_at(key, p.init, run.full_offset + (j - pos)));
      if (static_cast<int64_t>(values.size()) == kBatch) flush();
    }
    pos += run.length;
  }
  flush();
}

void materialise(Param& p, uint64_t seed, DType dtype, bool with_grad) {
  if (p.spec.local_numel() != shape_numel(p.shape))
    throw std::logic_error(fmt::format("{}: its partition spec holds {} elements, its shape {}",
                                       p.name, p.spec.local_numel(), shape_str(p.shape)));
  p.data = Tensor::empty(p.shape, MemCategory::parameters, dtype);
  write_initial_values(p, seed, 0, shape_numel(p.shape), p.data);
  if (with_grad) p.grad = Tensor::zeros(p.shape, MemCategory::gradients);
}

void materialise(const ParamList& params, uint64_t seed, DType dtype, bool with_grad) {
  for (Param* p : params) materialise(*p, seed, dtype, with_grad);
}

void store_host_values(Tensor dst, const std::vector<float>& values) {
  if (dst.device().kind == DeviceKind::cpu) return dst.write_f32(values.data(), dst.numel());
  Allocator host(Device::cpu());  // staging outside the rank's books
  Tensor staged = Tensor::empty(dst.shape(), MemCategory::workspace, dst.dtype(), &host);
  staged.write_f32(values.data(), staged.numel());
  dst.copy_from(staged);
}

}  // namespace mgpu
