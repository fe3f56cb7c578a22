#include "core/tensor/tensor.h"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "core/ops/cpu/precision.h"
#include "core/ops/cuda_table.h"
#include "core/runtime/context.h"

namespace mgpu {

int64_t shape_numel(const Shape& s) {
  // At most 2^60 elements, so numel x 8 bytes still fits an int64: a shape from a file or an
  // option can never overflow (a signed overflow would be undefined behaviour).
  constexpr int64_t kMaxElements = int64_t{1} << 60;
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(s));
    if (d != 0 && n > kMaxElements / d)
      throw std::invalid_argument("shape " + shape_str(s) + " has more than 2^60 elements");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

Tensor Tensor::empty(const Shape& shape, MemCategory category, DType dtype, Allocator* alloc) {
  Allocator& a = alloc ? *alloc : current_rank().allocator;
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = a.allocate(t.numel_ * static_cast<int64_t>(dtype_size(dtype)), category);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, MemCategory category, DType dtype, Allocator* alloc) {
  return empty(shape, category, dtype, alloc);  // the allocator zero-fills
}

Tensor Tensor::from(const Shape& shape, const std::vector<float>& values, MemCategory category,
                    Allocator* alloc) {
  if (shape_numel(shape) != static_cast<int64_t>(values.size()))
    throw std::invalid_argument(fmt::format("Tensor::from: shape {} holds {} values, got {}",
                                            shape_str(shape), shape_numel(shape), values.size()));
  Tensor t = empty(shape, category, DType::f32, alloc);
  if (t.has_data() && !values.empty()) {
    if (t.device().kind == DeviceKind::cpu)
      std::memcpy(t.f32(), values.data(), values.size() * sizeof(float));
    else  // device memory: copy straight from the host vector
      device_memory_hooks(t.device().kind).copy(t.raw(), values.data(), t.bytes());
  }
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  if (i < 0 || i >= n) throw std::out_of_range(fmt::format("dim {} of a {}-d tensor", i, n));
  return shape_[i];
}

Shape Tensor::strides() const {
  Shape s(shape_.size());
  int64_t stride = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    s[i] = stride;
    stride *= shape_[i];
  }
  return s;
}

const Device& Tensor::device() const {
  if (!storage_) throw std::logic_error("device() of an undefined tensor");
  return storage_->device();
}

MemCategory Tensor::category() const {
  if (!storage_) throw std::logic_error("category() of an undefined tensor");
  return storage_->category();
}

bool Tensor::has_data() const {
  return storage_ && storage_->device().has_data();
}

void* Tensor::raw() {
  if (!has_data()) throw std::logic_error("tensor has no data (undefined or phantom)");
  return static_cast<char*>(storage_->data()) + offset_ * dtype_size(dtype_);
}
const void* Tensor::raw() const {
  return const_cast<Tensor*>(this)->raw();
}

float* Tensor::f32() {
  if (dtype_ != DType::f32) throw std::logic_error("f32() of a non-f32 tensor");
  return static_cast<float*>(raw());
}
const float* Tensor::f32() const {
  return const_cast<Tensor*>(this)->f32();
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape_numel(shape) != numel_)
    throw std::invalid_argument(fmt::format("reshape {} -> {} changes the number of elements",
                                            shape_str(shape_), shape_str(shape)));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  if (ndim() < 1 || begin < 0 || end < begin || end > shape_[0])
    throw std::out_of_range(
        fmt::format("rows [{}, {}) of shape {}", begin, end, shape_str(shape_)));
  Tensor t = *this;
  int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  t.offset_ = offset_ + begin * row;
  t.shape_[0] = end - begin;
  t.numel_ = (end - begin) * row;
  return t;
}

Tensor Tensor::flat_range(int64_t begin, int64_t end) const {
  if (begin < 0 || end < begin || end > numel_)
    throw std::out_of_range(fmt::format("flat_range [{}, {}) of {} elements", begin, end, numel_));
  Tensor t = *this;
  t.offset_ = offset_ + begin;
  t.shape_ = {end - begin};
  t.numel_ = end - begin;
  return t;
}

StoreCounters& store_counters() {
  thread_local StoreCounters counters;
  return counters;
}

void count_unchecked_stores(int64_t stores) {
  store_counters().unchecked += stores;
}

// A cuda tensor's values go through the host: its bytes copied by the device memory hooks, then
// converted by the CPU kernel (core/ops/cpu/precision.h), so every 2-byte store rounds with the
// same code and is counted in store_counters() on either device.
void Tensor::read_f32(float* dst, int64_t n) const {
  if (n != numel_) throw std::invalid_argument("read_f32: wrong element count");
  if (n == 0) return;
  const DeviceKind kind = device().kind;
  if (kind == DeviceKind::phantom) throw std::logic_error("read_f32 of a phantom tensor");
  if (kind == DeviceKind::cpu || dtype_ == DType::f32) {
    if (kind == DeviceKind::cpu)
      cpu::convert(dst, DType::f32, raw(), dtype_, n);
    else
      device_memory_hooks(kind).copy(dst, raw(), bytes());
    return;
  }
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  device_memory_hooks(kind).copy(bits.data(), raw(), bytes());
  cpu::convert(dst, DType::f32, bits.data(), dtype_, n);
}

void Tensor::write_f32(const float* src, int64_t n) {
  if (n != numel_) throw std::invalid_argument("write_f32: wrong element count");
  if (n == 0) return;
  const DeviceKind kind = device().kind;
  if (kind == DeviceKind::phantom) throw std::logic_error("write_f32 of a phantom tensor");
  if (kind == DeviceKind::cpu) {
    cpu::convert(raw(), dtype_, src, DType::f32, n);
    return;
  }
  if (dtype_ == DType::f32) {
    device_memory_hooks(kind).copy(raw(), src, bytes());
    return;
  }
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  cpu::convert(bits.data(), dtype_, src, DType::f32, n);
  device_memory_hooks(kind).copy(raw(), bits.data(), bytes());
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> out(static_cast<size_t>(numel_));
  if (numel_ == 0) return out;
  if (device().kind == DeviceKind::phantom)
    throw std::logic_error("to_vector() of a phantom tensor");
  read_f32(out.data(), numel_);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.numel() != numel_ || src.dtype() != dtype_)
    throw std::invalid_argument(fmt::format("copy_from: {} {} into {} {}", shape_str(src.shape()),
                                            dtype_name(src.dtype()), shape_str(shape_),
                                            dtype_name(dtype_)));
  if (numel_ == 0 || !has_data() || !src.has_data()) return;
  if (device().kind == DeviceKind::cpu && src.device().kind == DeviceKind::cpu)
    std::memmove(raw(), src.raw(), bytes());
  else
    device_memory_hooks(DeviceKind::cuda).copy(raw(), src.raw(), bytes());
}

void Tensor::fill(float value) {
  if (!has_data()) return;
  if (device().kind == DeviceKind::cuda && cuda_kernels().fill && dtype_ == DType::f32) {
    cuda_kernels().fill(f32(), value, numel_);  // queued on the rank's compute stream
    return;
  }
  if (device().kind == DeviceKind::cpu && dtype_ == DType::f32) {
    float* p = f32();
    for (int64_t i = 0; i < numel_; ++i) p[i] = value;
    return;
  }
  // A 2-byte tensor (rounded once, stored everywhere) or a cuda tensor without the fill kernel.
  std::vector<float> values(static_cast<size_t>(numel_), value);
  write_f32(values.data(), numel_);
}

}  // namespace mgpu
