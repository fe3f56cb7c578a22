// Running one collective on a rank and checking its result against the serial answer: inputs
// of small integers, so fp32 sums are exact.
#include <string>
#include <vector>

#include "core/comm/comm.h"
#include "core/runtime/context.h"
#include "lessons/collectives_internal.h"

namespace mgpu::lessons {

namespace {

// Rank r's input value at element i: small integers, so fp32 sums are exact and checkable.
float input_value(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * (i % 7 + 1));
}
float sum_over_ranks(int ranks, int64_t i) {
  return static_cast<float>(ranks * (ranks + 1) / 2 * (i % 7 + 1));
}

// A comm buffer of n values made on the host and copied to the rank's device (a GPU's memory is
// not the host's); on the phantom device, shapes only.
template <class ValueAt>
Tensor buffer_of(int64_t n, ValueAt value_at) {
  if (!current_rank().device.has_data()) return Tensor::empty({n}, MemCategory::comm_buffers);
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = value_at(i);
  return Tensor::from({n}, values, MemCategory::comm_buffers);
}

}  // namespace

namespace detail {

// Runs one collective on this rank and checks the result against the serial answer.
bool run_and_check(comm::Comm& comm, const std::string& kind, int64_t n) {
  const int N = comm.size(), r = comm.rank();
  auto [mine_begin, mine_end] = comm::chunk_range(n, N, r);
  bool ok = true;
  auto expect = [&](const Tensor& t, auto&& value_at, int64_t offset) {
    if (!t.has_data()) return;                   // phantom: timing only
    const std::vector<float> v = t.to_vector();  // read back from the device
    for (int64_t i = 0; i < t.numel() && ok; ++i) ok = v[i] == value_at(offset + i);
  };
  if (kind == "all_reduce") {
    Tensor t = buffer_of(n, [&](int64_t i) { return input_value(r, i); });
    comm.all_reduce(t);
    expect(
        t, [&](int64_t i) { return sum_over_ranks(N, i); }, 0);
  } else if (kind == "reduce_scatter") {
    Tensor in = buffer_of(n, [&](int64_t i) { return input_value(r, i); });
    Tensor out = Tensor::empty({mine_end - mine_begin}, MemCategory::comm_buffers);
    comm.reduce_scatter(in, out);
    expect(
        out, [&](int64_t i) { return sum_over_ranks(N, i); }, mine_begin);
  } else if (kind == "all_gather") {
    Tensor in = buffer_of(mine_end - mine_begin,
                          [&](int64_t i) { return static_cast<float>(mine_begin + i); });
    Tensor out = Tensor::empty({n}, MemCategory::comm_buffers);
    comm.all_gather(in, out);
    expect(
        out, [](int64_t i) { return static_cast<float>(i); }, 0);
  } else if (kind == "all_to_all") {
    // Block j of rank r holds values naming (r, j), so a block that reaches the wrong rank or
    // slot is caught: afterwards block j of rank r must be the one rank j made for r.
    const int64_t block = n / N;
    auto value = [block](int src, int dst, int64_t i) {  // i: index in the whole buffer
      return static_cast<float>((src * 64 + dst) * 7 + (i % block) % 7);
    };
    Tensor in = buffer_of(n, [&](int64_t i) { return value(r, static_cast<int>(i / block), i); });
    Tensor out = Tensor::empty({n}, MemCategory::comm_buffers);
    comm.all_to_all(in, out);
    expect(
        out, [&](int64_t i) { return value(static_cast<int>(i / block), r, i); }, 0);
  } else {  // broadcast from rank 0
    Tensor t = r == 0 ? buffer_of(n, [](int64_t i) { return input_value(0, i); })
                      : Tensor::empty({n}, MemCategory::comm_buffers);
    comm.broadcast(t, 0);
    expect(
        t, [](int64_t i) { return input_value(0, i); }, 0);
  }
  return ok;
}

}  // namespace detail

}  // namespace mgpu::lessons
