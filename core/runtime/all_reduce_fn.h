// The all-reduce a communicator runs: the ring all-reduce of exercise 01 (the reference in
// solutions/, or the student's in exercises/), handed to each communicator when it is made
// (World -> RankContext::all_reduce -> the backends). Declared apart from comm.h so that the rank
// context can hold one without including the comm layer.
#pragma once
#include <cstdint>
#include <functional>

namespace mgpu {
class Tensor;
}

namespace mgpu::comm {

class Comm;
enum class ReduceOp : uint8_t;

// Ring all-reduce on top of comm.send/recv (any group size, any length, sum or avg), in place.
using AllReduceFn = std::function<void(Comm& comm, Tensor& t, ReduceOp op)>;

}  // namespace mgpu::comm
