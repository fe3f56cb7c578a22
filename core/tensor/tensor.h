// Tensor: a shape over a shared Storage. Always contiguous (row-major strides are derived from
// the shape); views share storage (reshape, a range of rows). Tensors are created through the
// current rank's allocator so every byte is tagged with a MemCategory.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/allocator.h"
#include "core/runtime/dtype.h"

namespace mgpu {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[4, 64, 128]"

class Tensor {
 public:
  Tensor() = default;

  // New tensors come from `alloc`, or from the calling rank's allocator when null.
  static Tensor empty(const Shape& shape, MemCategory category, DType dtype = DType::f32,
                      Allocator* alloc = nullptr);
  static Tensor zeros(const Shape& shape, MemCategory category, DType dtype = DType::f32,
                      Allocator* alloc = nullptr);  // same as empty: memory is zero-filled
  // A host f32 tensor holding `values` (for tests and small setups).
  static Tensor from(const Shape& shape, const std::vector<float>& values,
                     MemCategory category = MemCategory::workspace, Allocator* alloc = nullptr);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the back
  int64_t numel() const { return numel_; }
  Shape strides() const;  // row-major, in elements
  DType dtype() const { return dtype_; }
  const Device& device() const;
  MemCategory category() const;
  int64_t bytes() const { return numel_ * static_cast<int64_t>(dtype_size(dtype_)); }
  bool has_data() const;  // false on the phantom device

  // Typed access. Throws if the tensor has no data (phantom) or is not f32.
  float* f32();
  const float* f32() const;
  void* raw();
  const void* raw() const;

  // Views sharing storage.
  Tensor reshape(const Shape& shape) const;             // same numel
  Tensor rows(int64_t begin, int64_t end) const;        // [begin, end) along dim 0
  Tensor flat_range(int64_t begin, int64_t end) const;  // 1-D elements [begin, end)

  // Host-side helpers (tests, checkpoints, lessons). to_vector widens bf16/f16 to fp32 exactly.
  std::vector<float> to_vector() const;
  // Any dtype <-> fp32 on the host: read widens exactly, write rounds each value to the tensor's
  // type (round to nearest even; f16 overflows to inf and flushes to 0), counted in
  // store_counters(). A cuda tensor's bytes travel through the device memory hooks and are
  // converted on the host. `n` must equal numel().
  void read_f32(float* dst, int64_t n) const;
  void write_f32(const float* src, int64_t n);
  void copy_from(const Tensor& src);  // same numel; host or device copy
  void fill(float value);
  bool shares_storage(const Tensor& other) const { return storage_ == other.storage_; }
  bool same_view(const Tensor& o) const {
    return storage_ == o.storage_ && offset_ == o.offset_ && numel_ == o.numel_;
  }

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
};

// What rounding did on this thread's 2-byte stores since the last reset: the fp16 lesson counts
// values that were nonzero in fp32 and became 0 (underflow) or turned into inf (overflow). The
// CPU kernels (and so the emulated cuda device) check every store; a GPU's kernels (cuBLAS's
// 2-byte GEMM rounds inside cuBLAS) store without checking, and say how many stores they made in
// `unchecked`: while it is nonzero the two counts are incomplete and must not be shown as totals.
struct StoreCounters {
  int64_t flushed_to_zero = 0;
  int64_t overflowed_to_inf = 0;
  int64_t unchecked = 0;
};
StoreCounters& store_counters();
// Called by the GPU's kernels (core/ops/cuda/precision.cu) for the 2-byte values they stored.
void count_unchecked_stores(int64_t stores);

}  // namespace mgpu
