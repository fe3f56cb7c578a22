// --model presets and files, and --vocab: the published sizes reach the model, big presets on a
// CPU are refused with the way out (--device phantom), bad files and vocabularies are exit 2.
#include <catch2/catch.hpp>

#include <fstream>

#include "unit/mgpu_cli.h"

using mgpu::testing::run_mgpu;

TEST_CASE("a preset sets the published shape; typed options override it", "[lesson][model]") {
  auto r = run_mgpu({"run", "single_device", "--model", "gpt2-small", "--device", "phantom",
                     "--steps", "1", "--batch", "1"});
  REQUIRE(r.code == 0);
  // GPT-2 small: 12 layers, 768 wide, 12 heads, 1024 positions, 50257 tokens -> 124M parameters.
  CHECK_THAT(r.out, Catch::Contains("12 layers, dim 768, 12 heads, seq 1024, vocab 50257"));
  auto o = run_mgpu({"run", "single_device", "--model", "gpt2-small", "--device", "phantom",
                     "--layers", "2", "--steps", "1", "--batch", "1"});
  REQUIRE(o.code == 0);
  CHECK_THAT(o.out, Catch::Contains("2 layers, dim 768, 12 heads, seq 1024, vocab 50257"));
}

TEST_CASE("model from a JSON file, and a larger vocabulary", "[lesson][model]") {
  const std::string path = "/tmp/mgpu_test_model_preset.json";
  std::ofstream(path) << R"({"layers": 3, "dim": 48, "heads": 3, "seq": 16, "vocab": 100})";
  auto r = run_mgpu({"run", "single_device", "--model", path, "--steps", "1"});
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("3 layers, dim 48, 3 heads, seq 16, vocab 100"));
  auto v = run_mgpu(mgpu::testing::with_tiny_model({"run", "single_device", "--vocab", "80"}));
  REQUIRE(v.code == 0);
  CHECK_THAT(v.out, Catch::Contains("vocab 80"));
}

TEST_CASE("impossible models: one line, exit 2", "[lesson][model]") {
  const std::string bad = "/tmp/mgpu_test_model_bad.json";
  std::ofstream(bad) << R"({"layers": 3})";
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  std::vector<Case> cases = {
      {{"run", "ddp", "--model", "gpt3-175b"}, "--device phantom"},
      {{"run", "single_device", "--model", "gpt3-13b"}, "--device phantom"},
      {{"run", "single_device", "--model", "gpt5"}, "unknown --model"},
      {{"run", "single_device", "--model", bad}, "not a model file"},
      {{"run", "single_device", "--vocab", "10"}, "too small"},
  };
  for (const Case& c : cases) {
    INFO(c.args[1] << " " << c.args[3]);
    auto r = run_mgpu(c.args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(mgpu::testing::count_lines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(c.says));
  }
}

TEST_CASE("the GPT-2 presets tie their embeddings and have their published sizes",
          "[lesson][model][tied]") {
  const std::pair<const char*, const char*> published[] = {
      {"gpt2-small", "124,439,808"},
      {"gpt2-medium", "354,823,168"},
      {"gpt2-large", "774,030,080"},
      {"gpt2-xl", "1,557,611,200"},
  };
  for (const auto& [preset, count] : published) {
    INFO(preset);
    auto r = run_mgpu({"run", "single_device", "--model", preset, "--device", "phantom", "--steps",
                       "1", "--batch", "1"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains(std::string("-> ") + count + " parameters, tied embeddings"));
  }
  // Untied, the head is a second 50257 x 768 matrix: 124,439,808 + 38,597,376.
  auto u = run_mgpu({"run", "single_device", "--model", "gpt2-small", "--tie-embeddings", "off",
                     "--device", "phantom", "--steps", "1", "--batch", "1"});
  REQUIRE(u.code == 0);
  CHECK_THAT(u.out, Catch::Contains("-> 163,037,184 parameters\n"));
  // The tiny model keeps its own head unless asked.
  auto t = run_mgpu(mgpu::testing::with_tiny_model({"run", "single_device"}));
  REQUIRE(t.code == 0);
  CHECK_THAT(t.out, !Catch::Contains("tied embeddings"));
}

TEST_CASE("tie_embeddings in a model file, and bad tie values: one line, exit 2",
          "[lesson][model][tied]") {
  const std::string path = "/tmp/mgpu_test_model_tied.json";
  std::ofstream(path)
      << R"({"layers": 2, "dim": 16, "heads": 2, "seq": 8, "tie_embeddings": true})";
  auto r = run_mgpu({"run", "single_device", "--model", path, "--steps", "1"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("tied embeddings"));
  const std::string bad = "/tmp/mgpu_test_model_tied_bad.json";
  std::ofstream(bad) << R"({"layers": 2, "dim": 16, "heads": 2, "seq": 8, "tie_embeddings": 1})";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run", "single_device", "--model", bad}, "'tie_embeddings' must be true or false, got 1"},
      {{"run", "single_device", "--tie-embeddings", "yes"}, "--tie-embeddings"},
      {{"run", "zero", "--paper", "--tie-embeddings", "on"}, "drop --tie-embeddings"},
  };
  for (const auto& [args, says] : cases) {
    INFO(args[1] << " " << args[3]);
    auto b = run_mgpu(args);
    INFO(b.err);
    CHECK(b.code == 2);
    CHECK(mgpu::testing::count_lines(b.err) == 1);
    CHECK_THAT(b.err, Catch::Contains(says));
  }
}
