// The cpu device's host-memory pre-check (issue #18): the estimate it refuses runs by matches what
// the allocator measures, and what it names as fitting does fit while one more does not.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <regex>
#include <sstream>

#include "core/ops/cuda_emulation.h"
#include "core/runtime/host_memory.h"
#include "lessons/host_memory_check.h"
#include "lessons/single_device.h"

namespace test_host_memory_check {

using namespace mgpu;
using namespace mgpu::lessons;

namespace {

constexpr int64_t GiB = int64_t{1} << 30;

CommonOptions tiny_run() {
  CommonOptions c;
  c.steps = 1;
  c.batch = 8;
  c.quiet = true;
  return c;
}

GPTConfig config_of(const CommonOptions& c) {
  GPTConfig cfg;
  cfg.vocab = 64;  // the markov task's
  cfg.seq_len = c.seq;
  cfg.layers = c.layers;
  cfg.dim = c.dim;
  cfg.heads = c.heads;
  cfg.dtype = parse_precision(c.precision);
  cfg.recompute = parse_recompute(c.recompute);
  return cfg;
}

// The refusal's message, or "" when the run fits.
std::string refusal(const CommonOptions& c, int64_t available) {
  try {
    check_training_fits_host(c, config_of(c), available);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

int64_t number_after(const std::string& text, const std::string& before) {
  std::smatch m;
  REQUIRE(std::regex_search(text, m, std::regex(before + " ([0-9]+)")));
  return std::stoll(m[1]);
}

}  // namespace

TEST_CASE("the host-memory estimate matches the allocator's measured peaks", "[host_memory]") {
  // Bound: parameters, gradients and optimizer state within 3% (bf16 keeps a few fp32 tensors
  // beside its bf16 weights), activations and workspace within 2%, per category.
  struct Case {
    std::string precision, recompute, optimizer;
  };
  for (const Case& k : {Case{"fp32", "none", "adamw"}, Case{"fp32", "selective", "adamw"},
                        Case{"fp32", "full", "adamw"}, Case{"bf16", "none", "adamw"},
                        Case{"fp32", "none", "sgd"}}) {
    CommonOptions c = tiny_run();
    c.precision = k.precision;
    c.recompute = k.recompute;
    c.optimizer = k.optimizer;
    std::ostringstream out;
    const MemoryStats measured = train_single_device(c, out).memory;
    const HostFootprint predicted = training_footprint(config_of(c), c.optimizer, c.batch, 1);
    auto peak = [&](MemCategory m) { return double(measured.peak[int(m)]); };
    CAPTURE(k.precision, k.recompute, k.optimizer, predicted.breakdown());
    CHECK(predicted.parameters == Approx(peak(MemCategory::parameters)).epsilon(0.03));
    CHECK(predicted.gradients == Approx(peak(MemCategory::gradients)).epsilon(0.03));
    CHECK(predicted.optimizer_state == Approx(peak(MemCategory::optimizer_state)).epsilon(0.03));
    CHECK(predicted.activations == Approx(peak(MemCategory::activations)).epsilon(0.02));
    CHECK(predicted.workspace == Approx(peak(MemCategory::workspace)).epsilon(0.02));
    CHECK(predicted.data == int64_t{c.batch} * c.seq * 8);  // tokens + targets, int32
  }
}

TEST_CASE("the largest --batch a refusal names fits and one more does not", "[host_memory]") {
  CommonOptions c = tiny_run();
  c.batch = 1000000;
  const std::string said = refusal(c, 1 * GiB);
  CAPTURE(said);
  CHECK_THAT(said, Catch::Contains("activations") && Catch::Contains("workspace") &&
                       Catch::Contains("optimizer_state") && Catch::Contains("data"));
  const int64_t largest = number_after(said, "the largest --batch that fits is");
  c.batch = static_cast<int>(largest);
  CHECK(refusal(c, 1 * GiB).empty());
  c.batch += 1;
  CHECK_FALSE(refusal(c, 1 * GiB).empty());
}

TEST_CASE("a model too large for the host names the layers that fit", "[host_memory]") {
  CommonOptions c = tiny_run();
  c.layers = 1000000;
  const std::string said = refusal(c, 1 * GiB);
  CAPTURE(said);
  const int64_t largest = number_after(said, "at most --layers");
  CHECK_THAT(said, Catch::Contains("fit at --batch 8"));
  c.layers = static_cast<int>(largest);
  CHECK(refusal(c, 1 * GiB).empty());
  c.layers += 1;
  CHECK_FALSE(refusal(c, 1 * GiB).empty());
}

TEST_CASE("every thread rank's sampled batch counts, and phantom runs count only those",
          "[host_memory]") {
  CommonOptions c = tiny_run();
  c.batch = 4096;
  const GPTConfig cfg = config_of(c);
  CHECK(training_footprint(cfg, "adamw", c.batch, 4).data ==
        4 * training_footprint(cfg, "adamw", c.batch, 1).data);

  CommonOptions big = tiny_run();  // a gpt3-175b sized model: shapes only on phantom
  big.device = "phantom";
  big.layers = 96, big.dim = 12288, big.heads = 96, big.seq = 2048;
  CHECK(refusal(big, 1 * GiB).empty());
  big.device = "cpu";
  CHECK_THAT(refusal(big, 1 * GiB), Catch::Contains("add --device phantom"));
  big.device = "cuda";  // GPU memory is the allocator's business, not the host's
  CHECK(refusal(big, 1 * GiB).empty());
  {  // unless the GPU is emulated on the CPU (MGPU_CUDA_EMULATION=1): its memory is the host's
    setenv(cuda::kEmulationEnv, "1", 1);
    const std::string emulated = refusal(big, 1 * GiB);
    unsetenv(cuda::kEmulationEnv);
    CHECK_THAT(emulated, Catch::Contains("add --device phantom"));
  }

  c.device = "phantom";  // but a phantom run's token batches are real host memory
  c.batch = 100000000;
  const std::string said = refusal(c, 1 * GiB);
  CHECK_THAT(said, Catch::Contains("data") && !Catch::Contains("activations") &&
                       !Catch::Contains("add --device phantom"));
  CHECK(refusal(c, -1).empty());  // unknown host: nothing to compare with
}

TEST_CASE("collectives buffers are checked against the host", "[host_memory]") {
  CommonOptions c;
  c.ranks = 4;
  const int64_t budget = 3 * GiB / 4;  // of 1 GiB available
  auto refused = [&](int64_t max_bytes) -> std::string {
    try {
      check_collectives_fit_host(c, max_bytes, 1 * GiB);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(refused(4 << 20).empty());
  const std::string said = refused(100 * GiB);
  CAPTURE(said);
  CHECK_THAT(said, Catch::Contains("comm_buffers") && Catch::Contains("use --max-bytes"));
  // 4 ranks x (S + 2 S/4) = 6 S: 64 MiB (384 MiB) fits 768 MiB, 256 MiB (1.5 GiB) does not.
  CHECK_THAT(said, Catch::Contains("use --max-bytes 64.00 MiB or less"));
  CHECK(refused(64 << 20).empty());
  CHECK_FALSE(refused(budget).empty());
  CHECK_FALSE(refused(int64_t{1} << 62).empty());  // the largest size parse_size takes
  c.device = "phantom";
  CHECK(refused(100 * GiB).empty());
}

TEST_CASE("replicating layouts count one copy of the training state per rank", "[host_memory]") {
  CommonOptions c = tiny_run();
  c.ranks = 4;
  c.layers = 24, c.dim = 256, c.heads = 4;  // ~19M parameters: 300 MiB of state per copy
  const GPTConfig cfg = config_of(c);
  const HostFootprint one = training_footprint(cfg, "adamw", c.batch, 4);
  const HostFootprint four = training_footprint(cfg, "adamw", c.batch, 4, 4);
  CHECK(four.parameters == 4 * one.parameters);
  CHECK(four.optimizer_state == 4 * one.optimizer_state);
  CHECK(four.activations == one.activations);  // each replica holds its share of the batch
  // Between the two totals: one copy fits, a replica on each of 4 ranks does not.
  const int64_t available = (one.total() + four.total()) / 2 * 4 / 3;
  auto refused = [&](int copies) -> std::string {
    try {
      check_training_fits_host(c, cfg, available, copies);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(refused(1).empty());
  const std::string said = refused(4);
  CAPTURE(said);
  CHECK_THAT(said, Catch::Contains("on each of 4 ranks"));
}

TEST_CASE("under mpirun every process of the job on this host counts", "[host_memory]") {
  // Each process checks only itself; four of them on one host hold four times as much. A run that
  // one process fits is refused when the launcher says four share the host.
  CommonOptions c = tiny_run();
  c.layers = 24, c.dim = 256, c.heads = 4;  // ~19M parameters: 300 MiB of state
  const HostFootprint one = training_footprint(config_of(c), "adamw", c.batch, 1);
  const int64_t available = one.total() * 2;  // a budget of 1.5x one process's need
  CHECK(refusal(c, available).empty());
  struct LocalSize {  // what Open MPI's mpirun sets in each process it starts
    LocalSize() { setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1); }
    ~LocalSize() { unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE"); }
  } four_on_this_host;
  CHECK(processes_on_this_host() == 4);
  const std::string said = refusal(c, available);
  CAPTURE(said);
  CHECK_THAT(said, Catch::Contains("in each of the 4 processes of this job on this host"));
}

}  // namespace test_host_memory_check
