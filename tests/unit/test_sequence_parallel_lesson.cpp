// The sequence_parallel lesson: its --checkpoint (the gathered full model) equals single_device's
// after the same steps on 2 and 4 ranks; it prints the measured communication (g/g-bar's bytes
// equal TP's all-reduces) and activation memory (TP+SP below TP, each equal to its formula); a
// --seq that does not divide over the ranks is one line and exit 2.
#include <catch2/catch.hpp>

#include <regex>

#include <unistd.h>
#include <cstdio>
#include <filesystem>

#include "common/checkpoints.h"
#include "unit/mgpu_cli.h"

namespace test_sequence_parallel_lesson {

using mgpu::testing::run_mgpu;
using mgpu::testing::temp_path;

namespace {
std::vector<std::string> tiny(std::vector<std::string> args) {
  for (const char* a : {"--steps", "4", "--dim", "24", "--heads", "12", "--seq", "8", "--batch",
                        "4", "--layers", "2", "-q"})
    args.push_back(a);
  return args;
}
}  // namespace

TEST_CASE("sequence_parallel's checkpoint is the single-device model",
          "[sp][lesson][equivalence]") {
  const std::string single = temp_path("single.ckpt");
  REQUIRE(run_mgpu(tiny({"run", "single_device", "--checkpoint", single})).code == 0);
  const auto want = mgpu::testing::load_checkpoint_by_name(single);
  for (std::string ranks : {"2", "4"}) {
    INFO("tp = " << ranks);
    const std::string sp = temp_path("sp" + ranks + ".ckpt");
    auto r = run_mgpu(tiny({"run", "sequence_parallel", "--ranks", ranks, "--checkpoint", sp}));
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto got = mgpu::testing::load_checkpoint_by_name(sp);
    // rounding only (sums in another order), amplified by AdamW: TP's tolerance
    CHECK(mgpu::testing::max_difference(got, want, "param") < 2e-5f);
    CHECK(mgpu::testing::max_difference(got, want, "optimizer_state") < 2e-5f);
    std::remove(sp.c_str());
  }
  std::remove(single.c_str());
}

TEST_CASE("sequence_parallel measures TP's bytes and less activation memory", "[sp][lesson]") {
  auto r = run_mgpu(tiny({"run", "sequence_parallel", "--ranks", "2"}));
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // 2 layers, B*T*C*4 = 4*8*24*4 = 3 KiB per collective; a 2-rank ring sends half of it per
  // all-gather or reduce-scatter and all of it per all-reduce: 8 x 3 KiB = 24 KiB either way.
  CHECK_THAT(r.out, Catch::Contains("g and g-bar: reduce-scatters + 8 all-gathers sent 24.00 KiB, "
                                    "TP's all-reduces 24.00 KiB: the same bytes"));
  CHECK_THAT(r.out, Catch::Contains("on top: 6 all-gathers (9.00 KiB)"));
  CHECK_THAT(r.out, Catch::Contains("activation memory per GPU"));
  CHECK_THAT(r.out, Catch::Contains("sbh/t(34 + 5as/h)"));
  CHECK_THAT(r.out, Catch::Contains("step time: TP+SP"));
}

TEST_CASE("a --seq that does not divide over the ranks exits 2 in one line", "[sp][lesson]") {
  auto args = tiny({"run", "sequence_parallel", "--ranks", "4"});
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--seq") args[i + 1] = "10";
  auto r = run_mgpu(args);
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--seq 10 is not a multiple of 4: use --seq 8 or 12"));
  CHECK(mgpu::testing::count_lines(r.err) == 1);
}

TEST_CASE("what SP is for: a run that fits with it and not without", "[sp][lesson][memory]") {
  // phantom device: shapes and bytes only. 4 layers, dim 64, 64 tokens x 8 sequences, tp=4:
  // peaks about 6.6 MiB per GPU under TP and 5.5 MiB under TP+SP.
  const std::vector<std::string> model = {
      "--device", "phantom", "--ranks", "4", "--steps",  "1", "--dim", "64",         "--heads", "8",
      "--seq",    "64",      "--batch", "8", "--layers", "4", "-q",    "--capacity", "6MiB"};
  auto with = [&](const char* lesson) {
    std::vector<std::string> args = {"run", lesson};
    args.insert(args.end(), model.begin(), model.end());
    return run_mgpu(args);
  };
  auto tp = with("tensor_parallel");
  CHECK(tp.code == 2);  // out of memory
  auto sp = with("sequence_parallel");
  INFO(sp.out << sp.err);
  CHECK(sp.code == 0);
  CHECK_THAT(sp.out,
             Catch::Contains("plain TP does not fit in --capacity 6MiB per GPU, TP+SP does"));
}

TEST_CASE("sequence_parallel in bf16 prints its wire bytes beside the per-dtype formula",
          "[sp][lesson][precision]") {
  auto r = run_mgpu(tiny({"run", "sequence_parallel", "--ranks", "2", "--precision", "bf16"}));
  INFO(r.err);
  REQUIRE(r.code == 0);
  // reduce-scatters sum in fp32 (4 B), all-gathers move bf16 (2 B): measured = formula
  std::smatch m;
  const std::string text = r.out;
  REQUIRE(std::regex_search(
      text, m,
      std::regex(R"(all-gathers sent ([0-9.]+ \w+) \(formula: .*4 B summed in fp32 \+ 2 B )"
                 R"(gathered in bf16\) = ([0-9.]+ \w+)\))")));
  CHECK(m[1].str() == m[2].str());
}

}  // namespace test_sequence_parallel_lesson
