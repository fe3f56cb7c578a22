// The `mgpu` program, run in-process: listing, help, and one clear line + exit 2 for bad input.
#include <catch2/catch.hpp>

#include "mgpu_cli.h"

namespace test_cli {

using mgpu::testing::run_mgpu;
using Result = mgpu::testing::CliResult;
using mgpu::testing::count_lines;

TEST_CASE("mgpu list names every lesson with its summary", "[cli]") {
  Result r = run_mgpu({"list"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("single_device") && Catch::Contains("where memory goes"));
}

TEST_CASE("help is exit 0 and lists the options with defaults", "[cli]") {
  Result r = run_mgpu({"run", "single_device", "--help"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out,
             Catch::Contains("--steps") && Catch::Contains("--heads") && Catch::Contains("150"));
  CHECK(run_mgpu({"--help"}).code == 0);
  CHECK(run_mgpu({"profiles"}).code == 0);
}

TEST_CASE("bad input: one clear line and exit code 2", "[cli]") {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  std::vector<Case> cases = {
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{"run", "no_such_lesson"}, "unknown lesson 'no_such_lesson' (available: single_device"},
      {{"run", "single_device", "--no-such-option"}, "--no-such-option"},
      {{"run", "single_device", "--steps", "0"}, "--steps"},
      {{"run", "single_device", "--dim", "-4"}, "--dim"},
      {{"run", "single_device", "--batch", "abc"}, "--batch"},
      {{"run", "single_device", "--dim", "64", "--heads", "3"}, "heads (3) must divide dim (64)"},
      {{"run", "single_device", "--data", "/no/such/file.txt"},
       "--data: '/no/such/file.txt' does not exist"},
      {{"run", "single_device", "--task", "chess"}, "unknown task 'chess'"},
      {{"run", "single_device", "--profile", "9xH100"}, "unknown profile '9xH100'"},
      {{"run", "single_device", "--ranks", "2"}, "single_device runs on one rank"},
      {{"run", "single_device", "--capacity", "lots"}, "cannot read 'lots' as a size"},
      {{"run", "single_device", "--device", "tpu"}, "--device"},
      {{"run", "single_device", "--clock", "cuda"}, "--clock cuda needs --device cuda"},
      {{"run", "single_device", "--resume", "/no/such/ckpt.bin"}, "/no/such/ckpt.bin"},
      // mixture of experts: bad sizes, options without experts, layouts that cannot run them
      {{"run", "single_device", "--experts", "4", "--top-k", "5"},
       "top_k (5) must be at most experts (4): try top_k 2"},
      {{"run", "single_device", "--experts", "-1"}, "--experts"},
      {{"run", "single_device", "--experts", "4", "--top-k", "0"}, "--top-k"},
      {{"run", "single_device", "--experts", "4", "--moe-every", "0"}, "--moe-every"},
      {{"run", "single_device", "--experts", "4", "--capacity-factor", "0"}, "--capacity-factor"},
      {{"run", "single_device", "--experts", "4", "--capacity-factor", "lots"},
       "--capacity-factor"},
      {{"run", "single_device", "--top-k", "2"}, "--top-k shapes the experts of an MoE block"},
      {{"run", "context_parallel", "--ranks", "2", "--experts", "4"},
       "context parallelism cannot run experts (--experts 4)"},
      {{"run", "sequence_parallel", "--ranks", "2", "--experts", "4"},
       "sequence parallelism cannot run experts"},
      {{"run", "pipeline", "--ranks", "2", "--schedule", "zb-h1", "--experts", "4"},
       "--schedule zb-h1 cannot run experts"},
      {{"run", "hybrid", "--schedule", "zbv", "--experts", "4"},
       "--schedule zbv cannot run experts"},
  };
  for (auto& c : cases) {
    INFO("mgpu " << Catch::Detail::stringify(c.args));
    Result r = run_mgpu(c.args);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(c.says));
    CHECK(count_lines(r.err) == 1);
  }
}

TEST_CASE("a capacity too small for the model is an out-of-memory breakdown, exit 2", "[cli]") {
  Result r = run_mgpu({"run", "single_device", "--steps", "1", "--capacity", "64KiB"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("out of memory") && Catch::Contains("parameters") &&
                        Catch::Contains("capacity 64.00 KiB") &&
                        Catch::Contains("raise --capacity"));
}

}  // namespace test_cli
