// Seeded initialisation as a function of (seed, parameter, global element index). Element i of the
// single-device parameter `name` always gets the same value, whichever rank draws it, so a layout
// materialises exactly the shard its PartitionSpec keeps and that shard is, bit for bit, the slice
// of the single-device model: nothing larger than the shard ever exists (as FSDP's meta-device
// init followed by each rank materialising its own shard).
//
// The draw is counter-based: a SplitMix64 hash of (seed, name, index) gives two uniforms, and the
// Box-Muller transform a standard normal (Steele et al. 2014; Box & Muller 1958), so no random
// stream has to be replayed up to an element.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/param.h"

namespace mgpu {

// The initial value of element `index` (row-major) of the single-device parameter `name`.
float initial_value(uint64_t seed, const std::string& name, const ParamInit& init, int64_t index);

// Writes the initial values of p's local elements [lo, hi) (placed by p.spec) into `dst`, a tensor
// of hi - lo elements of any dtype: 2-byte types are rounded once from the fp32 values, with no
// fp32 copy on the device. Phantom tensors are left as they are (shapes only).
void write_initial_values(const Param& p, uint64_t seed, int64_t lo, int64_t hi, Tensor dst);

// Rounds host fp32 values (one per element) into dst, on any device and of any dtype: a cuda
// tensor gets them through a host staging copy outside the rank's books (the host cannot write
// a GPU's memory), a cpu tensor directly.
void store_host_values(Tensor dst, const std::vector<float>& values);

// Allocates p's data (in `dtype`, tagged parameters) with its initial values and, when
// `with_grad`, its fp32 zero gradient. The layout has set p.spec already.
void materialise(Param& p, uint64_t seed, DType dtype, bool with_grad = true);
void materialise(const ParamList& params, uint64_t seed, DType dtype, bool with_grad = true);

}  // namespace mgpu
