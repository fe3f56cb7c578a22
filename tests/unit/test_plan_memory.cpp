// A long search's memory (issue #33): what the planner keeps per simulated layout is its summary
// (plan::Prediction, plan::Simulated). Each simulation's World (its rank threads, traces and
// allocators) must be gone when simulate() returns, so `plan --max-simulated 10000` holds one
// simulation at a time plus a summary per layout. Measured as the heap's bytes in use (glibc's
// mallinfo2): an exact count, unlike the resident set, which keeps freed pages.
#include <catch2/catch.hpp>

#include <malloc.h>

#include "core/plan/search.h"
#include "core/plan/simulate.h"
#include "core/runtime/profile.h"
#include "exercises/exercises.h"

namespace test_plan_memory {

using namespace mgpu;
using namespace mgpu::plan;

namespace {

constexpr int64_t KiB = 1024;

int64_t heap_in_use() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  return static_cast<int64_t>(mallinfo2().uordblks);
#else
  return -1;
#endif
}

Workload small_gpt() {
  Workload w;
  w.seams = reference::seams().hybrid();
  w.model.vocab = 512;
  w.model.seq_len = 64;
  w.model.layers = 8;
  w.model.dim = 128;
  w.model.heads = 8;
  return w;
}

}  // namespace

TEST_CASE("simulate() keeps nothing of the simulated world once it returns", "[plan][memory]") {
  if (heap_in_use() < 0) {
    WARN("not measured: needs glibc's mallinfo2");
    return;
  }
  const HardwareProfile profile = HardwareProfile::load("DGX-H100");
  Layout l;
  l.dp = 2, l.pp = 4, l.microbatch_size = 2, l.microbatches = 16;
  l.schedule = "1f1b";
  l.precision = "fp32";
  simulate(small_gpt(), l, profile);  // the first call's one-time state (tables, thread locals)
  const int64_t before = heap_in_use();
  for (int i = 0; i < 10; ++i) simulate(small_gpt(), l, profile);
  const int64_t after = heap_in_use();
  CAPTURE(before, after);
  CHECK(after - before < 64 * KiB);
}

TEST_CASE("a search keeps a summary per simulated layout, not its simulation", "[plan][memory]") {
  if (heap_in_use() < 0) {
    WARN("not measured: needs glibc's mallinfo2");
    return;
  }
  SearchRequest r;
  r.workload = small_gpt();
  r.gpus = 8;
  r.global_batch = 32;
  r.profile = HardwareProfile::load("DGX-H100");
  r.pins.precisions = {"fp32"};
  r.rejected_probes = 0;
  auto held_after = [&](int max_simulated, int& simulated) {
    r.max_simulated = max_simulated;
    const int64_t before = heap_in_use();
    const SearchResult result = search(r);
    simulated = result.simulated;
    return heap_in_use() - before;  // measured while the result is alive
  };
  int one = 0, many = 0;
  held_after(1, one);  // one-time state
  const int64_t held_one = held_after(1, one);
  const int64_t held_many = held_after(40, many);
  CAPTURE(held_one, held_many, many);
  REQUIRE(many >= 30);
  // A summary is a layout, a prediction and a line of text: well under 4 KiB each.
  CHECK(held_many - held_one < (many - one) * 4 * KiB);
}

}  // namespace test_plan_memory
