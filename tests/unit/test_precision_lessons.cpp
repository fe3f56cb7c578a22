// The mixed_precision and activation_checkpointing lessons: what they print is measured, and
// options they cannot honour are refused with exit code 2.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <vector>

#include "unit/mgpu_cli.h"

namespace test_precision_lessons {

using namespace mgpu::testing;

TEST_CASE("mixed_precision prints measured bytes per parameter and the four loss curves",
          "[precision][lesson]") {
  CliResult r = run_mgpu(with_tiny_model({"run", "mixed_precision", "--batch", "4"}));
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // fp32 4+4+8, bf16 2+4+12 measured from the allocator, beside the formulas.
  CHECK_THAT(r.out, Catch::Contains("4.00       4.00       8.00   16.00   4 weights"));
  CHECK_THAT(r.out, Catch::Contains("2.00       4.00      12.00   18.00   2 weights"));
  CHECK_THAT(r.out, Catch::Contains("fp16 + loss scaling"));
  CHECK_THAT(r.out, Catch::Contains("flushed to zero"));
  CHECK_THAT(r.out, Catch::Contains("989 TFLOP/s"));  // bf16 peak of the default H100 profile
}

TEST_CASE("mixed_precision advises a larger model only to a run that is not bound by FLOPs",
          "[precision][lesson]") {
  // The advice names a phantom run at dim 2048; that run itself is told it is bound by FLOPs,
  // with the measured fp32/bf16 ratio beside the peaks' (not advised to run itself again).
  CliResult small = run_mgpu(with_tiny_model({"run", "mixed_precision", "--batch", "4"}));
  REQUIRE(small.code == 0);
  CHECK_THAT(small.out, Catch::Contains("try --device phantom --dim 2048"));
  CliResult big = run_mgpu({"run", "mixed_precision", "--device", "phantom", "--dim", "2048",
                            "--layers", "8", "--seq", "512", "--steps", "1"});
  INFO(big.out << big.err);
  REQUIRE(big.code == 0);
  CHECK_THAT(big.out, !Catch::Contains("try --device phantom"));
  CHECK_THAT(big.out, Catch::Contains("the peaks' ratio is 2.00x") &&
                          Catch::Contains("the step is bound by FLOPs"));
}

TEST_CASE("activation_checkpointing: measured bytes per layer equal the formula",
          "[recompute][lesson]") {
  CliResult r = run_mgpu(
      with_tiny_model({"run", "activation_checkpointing", "--batch", "4", "--capacity", "4MiB"}));
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("bit-identical: yes"));
  CHECK_THAT(r.out, !Catch::Contains("differs"));
  CHECK_THAT(r.out, Catch::Contains("largest batch"));
}

TEST_CASE("precision lessons refuse what they cannot honour", "[precision][lesson]") {
  for (auto args :
       {std::vector<std::string>{"run", "mixed_precision", "--ranks", "2"},
        std::vector<std::string>{"run", "mixed_precision", "--clock", "wall"},
        std::vector<std::string>{"run", "activation_checkpointing", "--trace", "x.json"},
        std::vector<std::string>{"run", "activation_checkpointing", "--precision", "fp8"}}) {
    CliResult r = run_mgpu(args);
    INFO(r.out << r.err);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
  }
}

TEST_CASE("precision lessons under mpirun say to run without mpirun", "[precision][lesson]") {
  // What mpirun -n 2 sets in each process (this test runs no MPI; the lessons refuse first).
  struct MpirunEnvironment {
    MpirunEnvironment() { setenv("OMPI_COMM_WORLD_SIZE", "2", 1); }
    ~MpirunEnvironment() { unsetenv("OMPI_COMM_WORLD_SIZE"); }
  };
  std::vector<CliResult> results;
  {
    MpirunEnvironment under_mpirun;
    for (const char* lesson : {"mixed_precision", "activation_checkpointing"})
      results.push_back(run_mgpu(with_tiny_model({"run", lesson, "--batch", "4"})));
  }
  for (const CliResult& r : results) {
    INFO(r.out << r.err);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains("run it without mpirun"));
    CHECK_THAT(r.err, !Catch::Contains("drop --ranks"));
  }
}

}  // namespace test_precision_lessons
