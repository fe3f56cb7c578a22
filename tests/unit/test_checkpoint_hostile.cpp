// Hostile checkpoints (issue #18): every inconsistent, damaged or absurd file is refused with one
// sentence naming the file, before any value reaches the model; writing never replaces anything
// but a regular file and never leaves a temporary file behind.
#include <catch2/catch.hpp>

#include "common/errors.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/model/checkpoint.h"
#include "core/optim/optimizer.h"
#include "core/runtime/context.h"

using namespace mgpu;
using mgpu::testing::error_of;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  RankContext ctx{0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::modeled};
  ScopedRank guard{ctx};
  fs::path dir = fs::temp_directory_path() / ("mgpu_ckpt_hostile_" + std::to_string(::getpid()));
  std::string path = (dir / "run.safetensors").string();
  Param w{"blocks.0.attn.weight", {4, 6}};
  Param b{"blocks.0.attn.bias", {6}};
  ParamList params() { return {&w, &b}; }

  Fixture() {
    fs::create_directories(dir);
    for (Param* p : params())
      for (int64_t i = 0; i < p->data.numel(); ++i)
        p->data.f32()[i] = 0.25f * static_cast<float>(i);
    optim::AdamW opt(params());
    save_checkpoint(path, params(), &opt, 3, {{"task", "markov"}});
    good = bytes();
  }
  std::string good;
  void reset() const { write(good); }
  ~Fixture() { fs::remove_all(dir); }

  std::string bytes() const {
    std::ifstream in(path, std::ios::binary);
    return {(std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()};
  }
  void write(const std::string& b) const { std::ofstream(path, std::ios::binary) << b; }
  uint64_t header_len() const {
    uint64_t n = 0;
    std::memcpy(&n, bytes().data(), 8);
    return n;
  }
  // Rewrites the file with the header changed by `edit` (data kept as it is).
  void edit_header(const std::function<void(json&)>& edit) const {
    const std::string b = bytes();
    const uint64_t n = header_len();
    json h = json::parse(b.substr(8, n));
    edit(h);
    write_raw_header(h.dump(), b.substr(8 + n));
  }
  void write_raw_header(std::string text, const std::string& data) const {
    while ((8 + text.size()) % 8 != 0) text.push_back(' ');
    const uint64_t n = text.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    write(out + text + data);
  }
  std::string load_error() {
    optim::AdamW opt(params());
    return error_of([&] { load_checkpoint(path, params(), &opt); });
  }
  // Rewrites a data float and the header's CRC32 to match (to reach the checks after the CRC).
  void set_value_keep_crc(size_t element, float value) const {
    std::string b = bytes();
    const uint64_t n = header_len();
    std::memcpy(b.data() + 8 + n + 4 * element, &value, 4);
    const std::string data = b.substr(8 + n);
    const uLong crc = ::crc32(::crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(data.data()),
                              static_cast<uInt>(data.size()));
    json h = json::parse(b.substr(8, n));
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08lx", crc);
    h["__metadata__"]["crc32"] = hex;
    write_raw_header(h.dump(), data);
  }
};

}  // namespace

TEST_CASE("a header length off by one is refused, never read as shifted data", "[checkpoint]") {
  Fixture f;
  const uint64_t n0 = f.header_len();
  for (int delta : {-1, +1, -8, +8}) {
    std::string b = f.good;
    const uint64_t n = n0 + static_cast<uint64_t>(delta);
    std::memcpy(b.data(), &n, 8);
    f.write(b);
    CAPTURE(delta);
    CHECK_THAT(f.load_error(), Catch::StartsWith("checkpoint '" + f.path + "' "));
  }
}

TEST_CASE("misaligned, fractional, overlapping and gapped offsets are refused", "[checkpoint]") {
  Fixture f;
  f.edit_header([](json& h) { h["blocks.0.attn.weight"]["data_offsets"] = {2, 98}; });
  CHECK_THAT(f.load_error(), Catch::Contains("not a multiple of 4"));
  f.reset();
  f.edit_header([](json& h) { h["blocks.0.attn.weight"]["data_offsets"] = {0.5, 96.5}; });
  CHECK_THAT(f.load_error(), Catch::Contains("is not an integer"));
  f.reset();
  f.edit_header([](json& h) { h["blocks.0.attn.bias"]["data_offsets"] = {92, 116}; });
  CHECK_THAT(f.load_error(), Catch::Contains("overlaps"));
  f.reset();
  f.edit_header([](json& h) { h["blocks.0.attn.bias"]["data_offsets"] = {100, 124}; });
  CHECK_THAT(f.load_error(), Catch::Contains("gap of 4 bytes"));
  f.reset();
  f.edit_header([](json& h) { h["blocks.0.attn.bias"]["shape"] = {5}; });
  CHECK_THAT(f.load_error(), Catch::Contains("spans 24 bytes, not 20"));
}

TEST_CASE("a tensor named twice is refused", "[checkpoint]") {
  Fixture f;
  const std::string b = f.bytes();
  const uint64_t n = f.header_len();
  std::string text = b.substr(8, n);
  const std::string entry = json::parse(text)["blocks.0.attn.bias"].dump();
  text.insert(1, "\"blocks.0.attn.bias\":" + entry + ",");
  f.write_raw_header(text, b.substr(8 + n));
  CHECK_THAT(f.load_error(), Catch::Contains("tensor 'blocks.0.attn.bias' appears twice"));
}

TEST_CASE("absurd shapes are refused without overflow", "[checkpoint]") {
  Fixture f;
  const int64_t big = int64_t{1} << 40;
  f.edit_header([&](json& h) { h["blocks.0.attn.bias"]["shape"] = {big, big, big}; });
  CHECK_THAT(f.load_error(), Catch::Contains("is larger than the file"));
  f.reset();
  f.edit_header([](json& h) { h["blocks.0.attn.bias"]["shape"] = {-6}; });
  CHECK_THAT(f.load_error(), Catch::Contains("has dimension -6"));
  f.reset();
  f.edit_header([](json& h) {
    h["blocks.0.attn.bias"]["shape"] = json::array({1, 1, 1, 1, 1, 1, 1, 1, 1, 6});
  });
  CHECK_THAT(f.load_error(), Catch::Contains("at most 8 dimensions"));
}

TEST_CASE("a step or step count outside [0, 2^40] is refused", "[checkpoint]") {
  for (const char* step : {"-5", "4611686018427387904", "1.5", "\"3\""}) {
    Fixture f;
    f.edit_header([&](json& h) { h["__metadata__"]["step"] = step; });
    CAPTURE(step);
    CHECK_THAT(f.load_error(), Catch::Contains("step"));
  }
  Fixture f;
  f.edit_header([](json& h) {
    json opt = json::parse(h["__metadata__"]["optimizer"].get<std::string>());
    opt["step_count"] = int64_t{1} << 62;
    h["__metadata__"]["optimizer"] = opt.dump();
  });
  CHECK_THAT(f.load_error(), Catch::Contains("the optimizer's step count"));
}

TEST_CASE("the format field is checked", "[checkpoint]") {
  Fixture f;
  f.edit_header([](json& h) { h["__metadata__"]["format"] = "pt"; });
  CHECK_THAT(f.load_error(), Catch::Contains("is a safetensors file but not an mgpu checkpoint"));
  f.reset();
  f.edit_header([](json& h) { h["__metadata__"].erase("format"); });
  CHECK_THAT(f.load_error(), Catch::Contains("no string 'format'"));
  f.reset();
  f.edit_header([](json& h) { h["__metadata__"]["version"] = "3"; });
  CHECK_THAT(f.load_error(), Catch::Contains("has format version 3"));
}

TEST_CASE("every flipped data byte is caught by the checksum", "[checkpoint]") {
  Fixture f;
  const std::string good = f.bytes();
  const size_t data = 8 + f.header_len();
  const size_t data_bytes = good.size() - data;
  for (size_t k = 0; k < 10; ++k) {
    std::string b = good;
    const size_t at = data + (k * 37) % data_bytes;
    b[at] = static_cast<char>(b[at] ^ (1 << (k % 8)));
    f.write(b);
    CAPTURE(at);
    CHECK_THAT(f.load_error(), Catch::Contains("is corrupt: the data's CRC32"));
  }
}

TEST_CASE("NaN and infinite values are refused even with a matching checksum", "[checkpoint]") {
  Fixture f;
  f.set_value_keep_crc(3, std::nanf(""));
  CHECK_THAT(f.load_error(), Catch::Contains("holds a non-finite value (nan) in tensor "
                                             "'blocks.0.attn.weight' at element 3"));
  f.reset();
  f.set_value_keep_crc(24, INFINITY);
  CHECK_THAT(f.load_error(),
             Catch::Contains("non-finite value (inf) in tensor 'blocks.0.attn.bias'"));
  f.reset();  // the helper itself is honest: a finite value with a fixed CRC loads
  f.set_value_keep_crc(3, 7.0f);
  CHECK(f.load_error() == "");
  CHECK(f.w.data.to_vector()[3] == 7.0f);
}

TEST_CASE("a refused checkpoint leaves the model untouched", "[checkpoint]") {
  Fixture f;
  f.set_value_keep_crc(30, std::nanf(""));  // the last tensor: everything before it is fine
  f.w.data.fill(-1.0f);
  CHECK(f.load_error() != "");
  CHECK(f.w.data.to_vector()[0] == -1.0f);
}

TEST_CASE("old MGPUCKPT files still load", "[checkpoint]") {
  Fixture f;
  std::vector<float> wv(24), bv(6);
  for (size_t i = 0; i < 24; ++i) wv[i] = static_cast<float>(i);
  for (size_t i = 0; i < 6; ++i) bv[i] = -static_cast<float>(i);
  json h = {{"format", "mgpu-checkpoint"},
            {"step", 9},
            {"config", {{"task", "reverse"}}},
            {"optimizer", nullptr},
            {"tensors",
             {{{"name", "blocks.0.attn.weight"},
               {"kind", "param"},
               {"dtype", "f32"},
               {"shape", {4, 6}},
               {"offset", 0},
               {"length", 96}},
              {{"name", "blocks.0.attn.bias"},
               {"kind", "param"},
               {"dtype", "f32"},
               {"shape", {6}},
               {"offset", 96},
               {"length", 24}}}}};
  std::string text = h.dump();
  while ((20 + text.size()) % 8 != 0) text.push_back(' ');
  const uint32_t version = 1;
  const uint64_t n = text.size();
  std::string b = "MGPUCKPT";
  b += std::string(reinterpret_cast<const char*>(&version), 4);
  b += std::string(reinterpret_cast<const char*>(&n), 8);
  b += text;
  b += std::string(reinterpret_cast<const char*>(wv.data()), 96);
  b += std::string(reinterpret_cast<const char*>(bv.data()), 24);
  f.write(b);
  CheckpointInfo info = load_checkpoint(f.path, f.params());
  CHECK(info.version == 1);
  CHECK(info.step == 9);
  CHECK(info.config["task"] == "reverse");
  CHECK(f.w.data.to_vector() == wv);
  CHECK(f.b.data.to_vector() == bv);

  // The same checks apply to the old format: a duplicate name, a non-integer offset.
  h["tensors"][1]["name"] = "blocks.0.attn.weight";
  h["tensors"][1]["shape"] = {4, 6};
  text = h.dump();
  while ((20 + text.size()) % 8 != 0) text.push_back(' ');
  const uint64_t n2 = text.size();
  std::string b2 = "MGPUCKPT" + std::string(reinterpret_cast<const char*>(&version), 4) +
                   std::string(reinterpret_cast<const char*>(&n2), 8) + text +
                   std::string(120, '\0');
  f.write(b2);
  CHECK_THAT(f.load_error(), Catch::Contains("appears twice"));
}

TEST_CASE("tensor API round trip: save_checkpoint_tensors / load_checkpoint_tensors",
          "[checkpoint]") {
  Fixture f;
  std::vector<CheckpointTensor> tensors = {{"a", "param", {2, 2}, {1, 2, 3, 4}},
                                           {"adamw.m.a", "optimizer_state", {4}, {0, 0, 1, 0}}};
  json opt = {{"name", "adamw"}, {"lr", 0.001}, {"step_count", 5}};
  save_checkpoint_tensors(f.path, tensors, 5, {{"layers", 1}}, opt);
  CheckpointContents c = load_checkpoint_tensors(f.path);
  CHECK(c.info.step == 5);
  CHECK(c.info.optimizer == opt);
  REQUIRE(c.tensors.size() == 2);
  CHECK(c.tensors[0].name == "a");
  CHECK(c.tensors[0].values == tensors[0].values);
  CHECK(c.tensors[1].kind == "optimizer_state");
  CHECK_THAT(error_of([&] { save_checkpoint_tensors(f.path, tensors, -1, {}, nullptr); }),
             Catch::Contains("step -1 is outside [0, 2^40]"));
}

TEST_CASE("writing renames only over a regular file or nothing, and leaves no temp file",
          "[checkpoint]") {
  Fixture f;
  auto leftovers = [&] {
    int n = 0;
    for (auto& e : fs::directory_iterator(f.dir))
      if (e.path().filename().string().find(".tmp") != std::string::npos) ++n;
    return n;
  };
  const fs::path folder = f.dir / "a_folder";
  fs::create_directories(folder);
  CHECK(error_of([&] { save_checkpoint(folder.string(), f.params(), nullptr, 0); }) ==
        "checkpoint '" + folder.string() +
            "' is a folder, not a regular file: name a new file or an existing one");
  CHECK(fs::is_directory(folder));
  CHECK(leftovers() == 0);

  const fs::path fifo = f.dir / "a_fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_THAT(error_of([&] { save_checkpoint(fifo.string(), f.params(), nullptr, 0); }),
             Catch::Contains("is a fifo, not a regular file"));
  CHECK(fs::is_fifo(fifo));

  if (fs::is_character_file("/dev/full")) {
    CHECK_THAT(error_of([&] { save_checkpoint("/dev/full", f.params(), nullptr, 0); }),
               Catch::Contains("is a character device, not a regular file"));
    CHECK(fs::is_character_file("/dev/full"));
  }
  CHECK_THAT(error_of([&] {
               save_checkpoint((f.dir / "no/such/dir/x").string(), f.params(), nullptr, 0);
             }),
             Catch::Contains("does not exist"));

  // A symlink to a regular file: the target is rewritten, the link stays a link.
  const fs::path link = f.dir / "link.safetensors";
  fs::create_symlink(f.path, link);
  save_checkpoint(link.string(), f.params(), nullptr, 42);
  CHECK(fs::is_symlink(link));
  CHECK(read_checkpoint_info(f.path).step == 42);
  CHECK(leftovers() == 0);
}

TEST_CASE("shapes whose element count would overflow are refused, not wrapped", "[checkpoint]") {
  const int64_t big = int64_t{1} << 40;
  CHECK_THAT(error_of([&] {
               shape_numel({big, big});
             }),
             Catch::Contains("has more than 2^60 elements"));
  CHECK(shape_numel({big, 0, big}) == 0);
  CHECK(shape_numel({int64_t{1} << 30, 1 << 30}) == int64_t{1} << 60);
}

TEST_CASE("the optimizer's step count cannot overflow", "[checkpoint]") {
  Fixture f;
  optim::SGD opt(f.params());
  opt.set_step_count(std::numeric_limits<int64_t>::max() - 1);
  CHECK_THAT(error_of([&] { opt.step(); }), Catch::Contains("step count"));
}
