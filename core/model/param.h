// A trainable parameter: its value and its gradient, tagged `parameters` and `gradients` in the
// rank's allocator. Models hand their parameters out as std::vector<Param*> in a fixed order
// (forward order); optimizers, data-parallel gradient sync and checkpoints all use that list.
//
// Every parameter also says how the layout that holds it splits it (its PartitionSpec: which
// elements of the single-device tensor of the same name this rank keeps) and how the seeded
// initialisation draws it (ParamInit). A layout sets the spec once, when it shards the model;
// initialisation, checkpoints and memory accounting all read it, so no paradigm matches names.
// (Megatron's set_tensor_model_parallel_attributes is the precedent.)
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/tensor.h"

namespace mgpu {

// A run of consecutive elements of a full tensor (flattened row-major).
struct ShardRun {
  int64_t full_offset = 0;
  int64_t length = 0;
  bool operator==(const ShardRun&) const = default;
};

// Which elements of the full (single-device) tensor this rank's tensor holds: the local tensor's
// elements, in order, are the concatenation of `runs`.
//   replicated (DDP, a layernorm under TP)          runs = {{0, numel}}
//   split along dim 0 into rows (column-parallel)   one run per row range (q, k, v: three)
//   split along dim 1 (row-parallel)                one run per row: {{row * in + c0, c1 - c0}}
//   a flat chunk of the local tensor (ZeRO)         the runs above cut to elements [lo, hi)
// A pipeline stage holds whole tensors of its own layers: replicated specs, `stage` set.
struct PartitionSpec {
  enum class Kind : uint8_t { replicated, split };  // across the tensor-parallel group
  Kind kind = Kind::replicated;
  Shape full_shape;
  std::vector<ShardRun> runs;
  bool flat_chunk = false;  // a ZeRO chunk of the tensor `kind` describes
  int stage = -1;           // the pipeline stage that owns it (-1: no pipeline)

  static PartitionSpec replicated(const Shape& full);
  // Rows [r0, r1) of each range, in order (dim 0 split, e.g. my heads of q, k and v).
  static PartitionSpec rows(const Shape& full,
                            const std::vector<std::pair<int64_t, int64_t>>& row_ranges);
  // Columns [c0, c1) of every row (dim 1 split).
  static PartitionSpec columns(const Shape& full, int64_t c0, int64_t c1);
  // Elements [lo, hi) of the local tensor this spec describes (a ZeRO chunk of it).
  PartitionSpec chunk(int64_t lo, int64_t hi) const;

  int64_t local_numel() const;
  int64_t full_numel() const { return shape_numel(full_shape); }
  bool split() const { return kind == Kind::split; }
};

// How the seeded initialisation draws a parameter's elements.
struct ParamInit {
  enum class Kind : uint8_t { normal, constant };
  Kind kind = Kind::constant;
  float value = 0.0f;  // normal: the standard deviation (mean 0); constant: the value
  static ParamInit normal(float stddev) { return {Kind::normal, stddev}; }
  static ParamInit constant(float v) { return {Kind::constant, v}; }
};

struct Param {
  std::string name;  // "blocks.3.attn.qkv.weight"
  Tensor data;
  Tensor grad;
  Shape shape;  // this rank's tensor (kept while a layout holds no data for it, e.g. ZeRO-3)
  ParamInit init;
  PartitionSpec spec;

  Param() = default;
  // Allocated now: fp32 zeros, replicated (optimizer tests, small set-ups).
  Param(std::string name_, const Shape& shape_)
      : name(std::move(name_)),
        data(Tensor::zeros(shape_, MemCategory::parameters)),
        grad(Tensor::zeros(shape_, MemCategory::gradients)),
        shape(shape_),
        spec(PartitionSpec::replicated(shape_)) {}
  // Declared only: no memory until a layout materialises it (core/model/init.h).
  static Param declared(std::string name, const Shape& shape, ParamInit init);
};

using ParamList = std::vector<Param*>;

}  // namespace mgpu
