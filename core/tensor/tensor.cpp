#include "core/tensor/tensor.h"

#include "core/ops/cuda_table.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

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

void Tensor::read_f32(float* dst, int64_t n) const {
  if (n != numel_) throw std::invalid_argument("read_f32: wrong element count");
  if (n == 0) return;
  if (device().kind != DeviceKind::cpu)
    throw std::logic_error("read_f32 of a non-CPU tensor (bf16/fp16 are emulated on the CPU)");
  if (dtype_ == DType::f32) {
    std::memcpy(dst, raw(), static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const auto* bits = static_cast<const uint16_t*>(raw());
  if (dtype_ == DType::bf16)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(bits[i]);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(bits[i]);
}

void Tensor::write_f32(const float* src, int64_t n) {
  if (n != numel_) throw std::invalid_argument("write_f32: wrong element count");
  if (n == 0) return;
  if (device().kind != DeviceKind::cpu)
    throw std::logic_error("write_f32 of a non-CPU tensor (bf16/fp16 are emulated on the CPU)");
  if (dtype_ == DType::f32) {
    std::memmove(raw(), src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* bits = static_cast<uint16_t*>(raw());
  int64_t flushed = 0, overflowed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t b = dtype_ == DType::bf16 ? f32_to_bf16_bits(src[i]) : f32_to_f16_bits(src[i]);
    bits[i] = b;
    const bool zero = (b & 0x7FFFu) == 0;
    const bool inf = (b & 0x7FFFu) == (dtype_ == DType::bf16 ? 0x7F80u : 0x7C00u);
    flushed += zero && src[i] != 0.0f;
    overflowed += inf && std::isfinite(src[i]);
  }
  store_counters().flushed_to_zero += flushed;
  store_counters().overflowed_to_inf += overflowed;
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> out(static_cast<size_t>(numel_));
  if (numel_ == 0) return out;
  if (device().kind == DeviceKind::cpu) {
    read_f32(out.data(), numel_);
  } else if (device().kind == DeviceKind::cuda) {
    if (dtype_ != DType::f32) throw std::logic_error("to_vector of a non-f32 CUDA tensor");
    device_memory_hooks(DeviceKind::cuda).copy(out.data(), raw(), bytes());
  } else {
    throw std::logic_error("to_vector() of a phantom tensor");
  }
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
  if (device().kind != DeviceKind::cpu) {
    if (dtype_ != DType::f32)
      throw std::logic_error("fill of a non-f32 CUDA tensor (bf16/fp16 are emulated on the CPU)");
    std::vector<float> host(static_cast<size_t>(numel_), value);
    device_memory_hooks(DeviceKind::cuda).copy(raw(), host.data(), bytes());
    return;
  }
  if (dtype_ != DType::f32) {  // rounded once, stored everywhere
    std::vector<float> values(static_cast<size_t>(numel_), value);
    write_f32(values.data(), numel_);
    return;
  }
  float* p = f32();
  for (int64_t i = 0; i < numel_; ++i) p[i] = value;
}

}  // namespace mgpu
