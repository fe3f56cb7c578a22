// Checkpoints: a round trip restores parameters, optimizer state and step exactly (training on
// from a checkpoint equals training straight through); mismatches and damage give clear errors.
#include <catch2/catch.hpp>

#include "common/errors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <unistd.h>

#include "core/model/checkpoint.h"
#include "core/optim/optimizer.h"
#include "core/runtime/context.h"

namespace test_checkpoint {

using namespace mgpu;

using mgpu::testing::error_of;

namespace {

struct Fixture {
  RankContext ctx{0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled};
  ScopedRank guard{ctx};
  // One file per process: ctest runs this file's cases in parallel processes.
  std::string path = (std::filesystem::temp_directory_path() /
                      ("mgpu_test_checkpoint_" + std::to_string(::getpid()) + ".ckpt"))
                         .string();
  ~Fixture() { std::filesystem::remove(path); }
};

// A stand-in model: two named parameters with deterministic values and gradients.
struct TinyModel {
  Param attn{"blocks.0.attn.weight", {4, 6}};
  Param bias{"blocks.0.attn.bias", {6}};
  ParamList params() { return {&attn, &bias}; }

  void fill(float base) {
    for (Param* p : params()) {
      float* d = p->data.f32();
      for (int64_t i = 0; i < p->data.numel(); ++i) d[i] = base + 0.01f * static_cast<float>(i);
    }
  }
  // A fake backward pass whose gradient depends on the weights and the step.
  void fake_backward(int step) {
    for (Param* p : params()) {
      const float* d = p->data.f32();
      float* g = p->grad.f32();
      for (int64_t i = 0; i < p->data.numel(); ++i)
        g[i] = d[i] * 0.5f - 0.1f * static_cast<float>(step % 3) + 0.001f * static_cast<float>(i);
    }
  }
};

}  // namespace

TEST_CASE("round trip restores params, optimizer state, step and config exactly", "[checkpoint]") {
  Fixture f;
  TinyModel a;
  a.fill(1.0f);
  optim::AdamW opt_a(a.params(), {.lr = 0.01f});
  for (int s = 0; s < 3; ++s) {
    a.fake_backward(s);
    opt_a.step();
  }
  nlohmann::json config = {{"model", {{"d_model", 4}}}, {"task", "markov"}};
  save_checkpoint(f.path, a.params(), &opt_a, 3, config);

  TinyModel b;
  b.fill(-5.0f);
  optim::AdamW opt_b(b.params(), {.lr = 0.01f});
  CheckpointInfo info = load_checkpoint(f.path, b.params(), &opt_b);
  CHECK(info.step == 3);
  CHECK(info.config == config);
  CHECK(info.optimizer["name"] == "adamw");
  CHECK(opt_b.step_count() == 3);
  CHECK(b.attn.data.to_vector() == a.attn.data.to_vector());
  CHECK(b.bias.data.to_vector() == a.bias.data.to_vector());
  for (size_t i = 0; i < opt_a.state().size(); ++i)
    CHECK(opt_b.state()[i].tensor.to_vector() == opt_a.state()[i].tensor.to_vector());

  // Resuming gives bit-identical training: two more steps on both.
  for (int s = 3; s < 5; ++s) {
    a.fake_backward(s);
    opt_a.step();
    b.fake_backward(s);
    opt_b.step();
  }
  CHECK(b.attn.data.to_vector() == a.attn.data.to_vector());
}

TEST_CASE("the header describes every tensor", "[checkpoint]") {
  Fixture f;
  TinyModel m;
  optim::SGD opt(m.params());
  save_checkpoint(f.path, m.params(), &opt, 7);
  CheckpointInfo info = read_checkpoint_info(f.path);
  REQUIRE(info.tensors.size() == 4);
  CHECK(info.tensors[0].name == "blocks.0.attn.weight");
  CHECK(info.tensors[0].shape == Shape{4, 6});
  CHECK(info.tensors[0].offset == 0);
  CHECK(info.tensors[0].length == 96);
  CHECK(info.tensors[1].offset == 96);
  CHECK(info.tensors[2].name == "sgd.momentum.blocks.0.attn.weight");
  CHECK(info.tensors[2].kind == "optimizer_state");
  CHECK(info.step == 7);
  CHECK(info.version == 3);
  CHECK(info.precision == "fp32");
}

TEST_CASE("a checkpoint is a safetensors file: u64 header length, JSON, data", "[checkpoint]") {
  Fixture f;
  TinyModel m;
  m.fill(0.5f);
  optim::AdamW opt(m.params());
  save_checkpoint(f.path, m.params(), &opt, 12, {{"task", "markov"}});
  std::ifstream in(f.path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);  // data 8-byte aligned, header padded with spaces
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  const nlohmann::json& w = h["blocks.0.attn.weight"];
  CHECK(w["dtype"] == "F32");
  CHECK(w["shape"] == nlohmann::json({4, 6}));
  CHECK(w["data_offsets"] == nlohmann::json({0, 96}));
  CHECK(h["blocks.0.attn.bias"]["data_offsets"] == nlohmann::json({96, 120}));
  // Every __metadata__ value is a string, as the safetensors spec requires.
  for (auto& [key, value] : h["__metadata__"].items()) CHECK(value.is_string());
  CHECK(h["__metadata__"]["format"] == "mgpu-checkpoint");
  CHECK(h["__metadata__"]["step"] == "12");
  CHECK(nlohmann::json::parse(h["__metadata__"]["optimizer"].get<std::string>())["name"] ==
        "adamw");
  CHECK(nlohmann::json::parse(h["__metadata__"]["kinds"].get<std::string>())["adamw.m.blocks.0."
                                                                             "attn.bias"] ==
        "optimizer_state");
  CHECK(h["__metadata__"]["crc32"].get<std::string>().size() == 8);
  float first = 0;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  CHECK(first == 0.5f);
  // The total is exactly header + tensors: nothing else in the file.
  int64_t end = 0;
  for (auto& [name, t] : h.items())
    if (name != "__metadata__") end = std::max<int64_t>(end, t["data_offsets"][1]);
  CHECK(static_cast<int64_t>(bytes.size()) == 8 + static_cast<int64_t>(n) + end);
}

TEST_CASE("a checkpoint of another shape is refused with both shapes", "[checkpoint]") {
  Fixture f;
  Param w("blocks.0.attn.weight", {64, 192});
  save_checkpoint(f.path, {&w}, nullptr, 0);
  Param other("blocks.0.attn.weight", {64, 128});
  other.data.fill(3.0f);
  CHECK(error_of([&] { load_checkpoint(f.path, {&other}); }) ==
        "checkpoint '" + f.path +
            "' has blocks.0.attn.weight [64, 192] but the model expects [64, 128]");
  CHECK(other.data.to_vector()[0] == 3.0f);  // untouched

  Param renamed("blocks.0.mlp.weight", {64, 192});
  CHECK_THAT(error_of([&] { load_checkpoint(f.path, {&renamed}); }),
             Catch::Contains("has no tensor 'blocks.0.mlp.weight' but the model expects one"));
}

TEST_CASE("optimizer kind mismatch is refused", "[checkpoint]") {
  Fixture f;
  TinyModel m;
  optim::SGD sgd(m.params());
  save_checkpoint(f.path, m.params(), &sgd, 1);
  optim::AdamW adam(m.params());
  CHECK_THAT(error_of([&] { load_checkpoint(f.path, m.params(), &adam); }),
             Catch::Contains("holds sgd optimizer state but the optimizer is adamw"));
  // Weights only: no optimizer given, loads fine.
  CHECK(error_of([&] { load_checkpoint(f.path, m.params()); }) == "");
}

TEST_CASE("truncated, corrupt and missing files give clear errors", "[checkpoint]") {
  Fixture f;
  TinyModel m;
  save_checkpoint(f.path, m.params(), nullptr, 0);
  auto size = std::filesystem::file_size(f.path);

  std::filesystem::resize_file(f.path, size - 10);
  CHECK_THAT(error_of([&] { load_checkpoint(f.path, m.params()); }),
             Catch::Contains("is truncated: tensor 'blocks.0.attn.bias'"));
  std::filesystem::resize_file(f.path, 30);
  CHECK_THAT(error_of([&] { load_checkpoint(f.path, m.params()); }),
             Catch::Contains("is truncated): its first 8 bytes give a"));
  std::filesystem::resize_file(f.path, 5);
  CHECK_THAT(error_of([&] { load_checkpoint(f.path, m.params()); }),
             Catch::Contains("is truncated"));

  {
    std::ofstream out(f.path, std::ios::binary);
    out << "PK\x03\x04 this is a zip file, not a checkpoint at all";
  }
  CHECK_THAT(error_of([&] { load_checkpoint(f.path, m.params()); }),
             Catch::Contains("is not an mgpu checkpoint"));

  save_checkpoint(f.path, m.params(), nullptr, 0);
  {
    std::fstream io(f.path, std::ios::binary | std::ios::in | std::ios::out);
    io.seekp(9);
    io.write("#", 1);  // break the JSON
  }
  CHECK_THAT(error_of([&] { load_checkpoint(f.path, m.params()); }),
             Catch::Contains("has a corrupt header"));

  CHECK_THAT(error_of([&] { load_checkpoint(f.path + ".missing", m.params()); }),
             Catch::Contains("cannot be opened"));
}

}  // namespace test_checkpoint
