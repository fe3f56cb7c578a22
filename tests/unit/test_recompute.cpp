// Activation checkpointing: selective and full recompute give bit-identical parameters to none,
// keep less activation memory, and show their extra forward as "recompute" trace events.
#include <catch2/catch.hpp>

#include "core/data/task.h"
#include "core/model/gpt.h"
#include "lessons/precision_training.h"

using namespace mgpu;

namespace {
lessons::PrecisionRun run_with(Recompute mode, DType dtype) {
  lessons::PrecisionRunOptions o;
  o.model.seq_len = 32;
  o.model.layers = 2;
  o.model.dtype = dtype;
  o.model.recompute = mode;
  o.steps = 3;
  o.batch = 4;
  o.profile = HardwareProfile::load("8xH100-NVLink");
  auto task = data::make_task("markov", 7, {.seq_len = 32});
  o.model.vocab = task->vocab_size();
  return lessons::train_precision_run(o, *task);
}
int64_t activations_peak(const lessons::PrecisionRun& r) {
  return r.memory.peak[int(MemCategory::activations)];
}
}  // namespace

TEST_CASE("recompute selective/full: bit-identical parameters, lower activation peak",
          "[recompute]") {
  for (DType dtype : {DType::f32, DType::bf16}) {
    DYNAMIC_SECTION(precision_name(dtype)) {
      lessons::PrecisionRun none = run_with(Recompute::none, dtype);
      lessons::PrecisionRun selective = run_with(Recompute::selective, dtype);
      lessons::PrecisionRun full = run_with(Recompute::full, dtype);
      REQUIRE(!none.final_params.empty());
      CHECK(selective.final_params == none.final_params);  // bit for bit
      CHECK(full.final_params == none.final_params);
      CHECK(selective.losses == none.losses);
      CHECK(full.losses == none.losses);
      INFO("activation peaks: none " << activations_peak(none) << ", selective "
                                     << activations_peak(selective) << ", full "
                                     << activations_peak(full));
      CHECK(activations_peak(selective) < activations_peak(none));
      CHECK(activations_peak(full) < activations_peak(selective));
      // The extra forward is on the clock and in the trace.
      CHECK(none.recompute_seconds == 0.0);
      CHECK(selective.recompute_seconds > 0.0);
      CHECK(full.recompute_seconds > selective.recompute_seconds);
      CHECK(full.modeled_step_seconds > none.modeled_step_seconds);
    }
  }
}

TEST_CASE("recompute modes parse and name themselves; unknown names are refused", "[recompute]") {
  CHECK(parse_recompute("full") == Recompute::full);
  CHECK(std::string(recompute_name(Recompute::selective)) == "selective");
  CHECK_THROWS_WITH(parse_recompute("half"), Catch::Contains("none, selective or full"));
  CHECK(parse_precision("fp16") == DType::f16);
  CHECK_THROWS_WITH(parse_precision("fp8"), Catch::Contains("fp32, bf16 or fp16"));
}
