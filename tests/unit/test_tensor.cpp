// Tensors and the per-rank allocator: categories, current/peak accounting, capacity errors, views.
#include <catch2/catch.hpp>

#include "core/runtime/context.h"
#include "core/tensor/tensor.h"

namespace test_tensor {

using namespace mgpu;

namespace {
// A fresh rank with its own allocator, so counts start at zero.
struct FreshRank {
  RankContext ctx{0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled};
  ScopedRank guard{ctx};
};
int64_t current(const Allocator& a, MemCategory c) {
  return a.stats().current[static_cast<int>(c)];
}
int64_t peak(const Allocator& a, MemCategory c) {
  return a.stats().peak[static_cast<int>(c)];
}
}  // namespace

TEST_CASE("allocations are counted per category, with peaks", "[tensor][allocator]") {
  FreshRank r;
  Allocator& a = r.ctx.allocator;
  {
    Tensor w = Tensor::empty({10, 10}, MemCategory::parameters);
    Tensor g = Tensor::zeros({10, 10}, MemCategory::gradients);
    {
      Tensor act = Tensor::empty({4, 25}, MemCategory::activations);
      CHECK(current(a, MemCategory::activations) == 400);
      CHECK(a.stats().total == 1200);
    }
    CHECK(current(a, MemCategory::activations) == 0);
    CHECK(peak(a, MemCategory::activations) == 400);
    CHECK(current(a, MemCategory::parameters) == 400);
    CHECK(current(a, MemCategory::gradients) == 400);
    CHECK(a.stats().peak_total == 1200);
  }
  CHECK(a.stats().total == 0);
  a.reset_peaks();
  CHECK(a.stats().peak_total == 0);
}

TEST_CASE("exceeding the capacity raises OutOfMemory with the breakdown", "[tensor][allocator]") {
  FreshRank r;
  r.ctx.allocator.set_capacity(1000);
  Tensor p = Tensor::empty({100}, MemCategory::parameters);  // 400 B
  try {
    Tensor s = Tensor::empty({200}, MemCategory::optimizer_state);  // 800 B: too much
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("out of memory"));
    CHECK_THAT(msg, Catch::Contains("optimizer_state"));
    CHECK_THAT(msg, Catch::Contains("parameters"));
    CHECK_THAT(msg, Catch::Contains("capacity 1000 B"));
    CHECK(e.stats().current[static_cast<int>(MemCategory::parameters)] == 400);
  }
  // The failed allocation left the books unchanged.
  CHECK(r.ctx.allocator.stats().total == 400);
}

TEST_CASE("memory changes reach the tracer as counter samples", "[tensor][allocator]") {
  FreshRank r;
  {
    Tensor a = Tensor::empty({8}, MemCategory::activations);
    KernelScope k("work", 0, 0);  // the ideal(0) profile: free, but a new instant is not needed
  }
  auto& samples = r.ctx.tracer.counters();
  REQUIRE(!samples.empty());
  CHECK(samples.back().bytes[static_cast<int>(MemCategory::activations)] == 0);
}

TEST_CASE("views share storage: reshape, rows, flat ranges", "[tensor]") {
  FreshRank r;
  Tensor t = Tensor::from({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(t.strides() == Shape{4, 1});
  Tensor mid = t.rows(1, 3);
  CHECK(mid.shape() == Shape{2, 4});
  CHECK(mid.f32()[0] == 4);
  mid.f32()[0] = 40;
  CHECK(t.f32()[4] == 40);
  CHECK(t.reshape({12}).flat_range(10, 12).to_vector() == std::vector<float>{10, 11});
  CHECK_THROWS_AS(t.reshape({5}), std::invalid_argument);
  CHECK_THROWS_AS(t.rows(2, 4), std::out_of_range);
  CHECK(shape_str(t.shape()) == "[3, 4]");
}

TEST_CASE("phantom tensors have shapes and bytes but no data", "[tensor]") {
  RankContext ctx(0, 1, Device::phantom(), HardwareProfile::ideal(0), ClockKind::modeled);
  ScopedRank g(ctx);
  Tensor t = Tensor::empty({1024, 1024}, MemCategory::parameters);
  CHECK(t.bytes() == 4 << 20);
  CHECK_FALSE(t.has_data());
  CHECK_THROWS_AS(t.f32(), std::logic_error);
  CHECK(ctx.allocator.stats().total == 4 << 20);
}

}  // namespace test_tensor
