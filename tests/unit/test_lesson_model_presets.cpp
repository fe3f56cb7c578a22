// --model presets and files, and --vocab: the published sizes reach the model, big presets on a
// CPU are refused with the way out (--device phantom), bad files and vocabularies are exit 2.
#include <catch2/catch.hpp>

#include <fstream>

#include "unit/mgpu_cli.h"

namespace test_lesson_model_presets {

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

TEST_CASE("MoE presets and model-file fields reach the model; bad ones are one line, exit 2",
          "[lesson][model][moe]") {
  // mixtral-8x7b: Mixtral's published sizes and block (SwiGLU experts, 8 kv heads, RMSNorm,
  // RoPE, no biases): its published 46.7B, 12.9B active per token
  auto m = run_mgpu({"run", "single_device", "--model", "mixtral-8x7b", "--device", "phantom",
                     "--steps", "1", "--batch", "1", "--capacity", "1TiB"});
  INFO(m.err);
  REQUIRE(m.code == 0);
  CHECK_THAT(m.out, Catch::Contains("32 layers, dim 4096, 32 heads, seq 4096, vocab 32000 -> "
                                    "46,702,792,704 parameters; rmsnorm, swiglu MLP of width "
                                    "14336, rope positions (theta 1000000), 8 kv heads (GQA), "
                                    "no biases, 8 experts top-2 (12,879,925,248 active per "
                                    "token)"));
  auto t = run_mgpu({"run", "single_device", "--model", "tiny-moe", "--steps", "1"});
  REQUIRE(t.code == 0);
  CHECK_THAT(t.out, Catch::Contains("2 layers, dim 64, 4 heads, seq 32") &&
                        Catch::Contains("4 experts top-2"));
  const std::string path = "/tmp/mgpu_test_model_moe.json";
  std::ofstream(path) << R"({"layers": 4, "dim": 16, "heads": 2, "seq": 8, "experts": 4,
                             "top_k": 1, "moe_every": 2, "expert_hidden": 24,
                             "capacity_factor": "dropless", "aux_loss_coef": 0.02})";
  auto f = run_mgpu({"run", "single_device", "--model", path, "--steps", "1"});
  INFO(f.err);
  REQUIRE(f.code == 0);
  CHECK_THAT(f.out, Catch::Contains("4 experts top-1 every 2 blocks"));
  const std::string bad = "/tmp/mgpu_test_model_moe_bad.json";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"layers": 2, "dim": 16, "heads": 2, "seq": 8, "experts": 4, "capacity_factor": 0})",
       "'capacity_factor' must be a number > 0 (e.g. 1.25) or \"dropless\", got 0"},
      {R"({"layers": 2, "dim": 16, "heads": 2, "seq": 8, "experts": 4, "top_k": 2.5})",
       "'top_k' must be a whole number"},
      {R"({"layers": 2, "dim": 16, "heads": 2, "seq": 8, "experts": 2, "top_k": 3})",
       "top_k (3) must be at most experts (2)"},
      {R"({"layers": 2, "dim": 16, "heads": 2, "seq": 8, "experts": 4, "aux_loss_coef": -1})",
       "'aux_loss_coef' must be a number >= 0"},
  };
  for (const auto& [text, says] : cases) {
    std::ofstream(bad) << text;
    auto b = run_mgpu({"run", "single_device", "--model", bad, "--steps", "1"});
    INFO(text << "\n" << b.err);
    CHECK(b.code == 2);
    CHECK(mgpu::testing::count_lines(b.err) == 1);
    CHECK_THAT(b.err, Catch::Contains(says));
  }
}

}  // namespace test_lesson_model_presets
