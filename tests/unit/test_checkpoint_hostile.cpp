// Hostile checkpoints (issues #18 and #33): every inconsistent, damaged, edited or absurd file is
// refused with one sentence naming the file, before any value reaches the model; the checksum
// covers the header as well as the data, and what a forger who recomputes it can still write is
// checked for what it is (Adam's v >= 0, state matching the parameters, step counts, the loss
// scaler's fields). Writing never replaces anything but a regular file and never leaves a
// temporary file behind.
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

namespace test_checkpoint_hostile {

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
  // What a forger does: recomputes the whole-file CRC32 (its own 8 digits read as zeros) after
  // an edit, to reach the checks after the checksum.
  void reseal() const {
    std::string b = bytes();
    const size_t at = b.find("\"crc32\":\"") + 9;
    b.replace(at, 8, "00000000");
    const uLong crc = ::crc32(::crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(b.data()),
                              static_cast<uInt>(b.size()));
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08lx", crc);
    b.replace(at, 8, hex);
    write(b);
  }
  // Rewrites a data float and reseals the file.
  void set_value_keep_crc(size_t element, float value) const {
    std::string b = bytes();
    std::memcpy(b.data() + 8 + header_len() + 4 * element, &value, 4);
    write(b);
    reseal();
  }
  // The first element of tensor `name` in the data section.
  size_t element_of(const std::string& name) const {
    const json h = json::parse(bytes().substr(8, header_len()));
    return h.at(name).at("data_offsets")[0].get<size_t>() / 4;
  }
  // Edits the header's optimizer entry, then reseals.
  void edit_optimizer(const std::function<void(json&)>& edit) const {
    edit_header([&](json& h) {
      json opt = json::parse(h["__metadata__"]["optimizer"].get<std::string>());
      edit(opt);
      h["__metadata__"]["optimizer"] = opt.dump();
    });
    reseal();
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
  f.edit_header([](json& h) { h["__metadata__"]["version"] = "4"; });
  CHECK_THAT(f.load_error(), Catch::Contains("has format version 4"));
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
    CHECK_THAT(f.load_error(), Catch::Contains("is corrupt: the file's CRC32"));
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

TEST_CASE("older formats, whose checksum does not cover the header, are refused", "[checkpoint]") {
  Fixture f;
  // Version 1 (MGPUCKPT): no checksum at all, so a copy in it would drop the file's protection.
  json h = {{"format", "mgpu-checkpoint"}, {"step", 9}, {"optimizer", nullptr}, {"tensors", {}}};
  std::string text = h.dump();
  const uint32_t version = 1;
  const uint64_t n = text.size();
  f.write("MGPUCKPT" + std::string(reinterpret_cast<const char*>(&version), 4) +
          std::string(reinterpret_cast<const char*>(&n), 8) + text);
  CHECK(f.load_error() == "checkpoint '" + f.path +
                              "' is an MGPUCKPT file (format version 1), which carries no "
                              "checksum; this build reads version 3 only: train again with "
                              "--checkpoint to write one");
  // Version 2: safetensors whose CRC32 covered only the data.
  f.reset();
  f.edit_header([](json& hd) { hd["__metadata__"]["version"] = "2"; });
  f.reseal();
  CHECK_THAT(f.load_error(),
             Catch::Contains("has format version 2, whose checksum does not cover its header"));
}

TEST_CASE("the checksum covers the header: swapped offsets, swapped moments, a changed step",
          "[checkpoint]") {
  const std::string m = "adamw.m.blocks.0.attn.weight", v = "adamw.v.blocks.0.attn.weight";
  std::vector<std::function<void(json&)>> edits = {
      [](json& h) {  // two tensors of the same size trade places
        std::swap(h["adamw.m.blocks.0.attn.bias"]["data_offsets"],
                  h["adamw.v.blocks.0.attn.bias"]["data_offsets"]);
      },
      [&](json& h) { std::swap(h[m], h[v]); },           // Adam's m and v trade names
      [](json& h) { h["__metadata__"]["step"] = "2"; },  // a lie about the step
      [](json& h) { h["__metadata__"]["precision"] = "bf16"; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    Fixture f;
    f.edit_header(edits[i]);
    CAPTURE(i);
    CHECK_THAT(f.load_error(), Catch::Contains("is corrupt: the file's CRC32 is"));
    CHECK_THAT(f.load_error(), Catch::Contains("the header or the data was changed"));
  }
  Fixture f;  // the edit's header is otherwise valid: resealed, it loads (the test is honest)
  f.edit_header(edits[0]);
  f.reseal();
  CHECK(f.load_error() == "");
}

TEST_CASE("resealed forgeries are checked for what the values are", "[checkpoint]") {
  Fixture f;
  f.set_value_keep_crc(f.element_of("adamw.v.blocks.0.attn.weight") + 2, -1.0f);
  CHECK_THAT(f.load_error(),
             Catch::Contains("holds a negative second moment (-1) in "
                             "'adamw.v.blocks.0.attn.weight' at element 2: Adam's v is a mean "
                             "of squares, never negative"));
  f.reset();
  f.set_value_keep_crc(f.element_of("adamw.m.blocks.0.attn.weight") + 2, -1.0f);
  CHECK(f.load_error() == "");  // a negative first moment is normal

  f.reset();
  f.edit_optimizer([](json& o) { o["step_count"] = 4; });  // the file says step 3
  CHECK_THAT(f.load_error(),
             Catch::Contains("the optimizer's step count 4 is more than the 3 steps trained"));
  f.reset();
  f.edit_optimizer([](json& o) { o["lr"] = "0.001"; });
  CHECK_THAT(f.load_error(), Catch::Contains("the optimizer's field 'lr' is not a number"));
  f.reset();
  f.edit_optimizer([](json& o) { o.erase("name"); });
  CHECK_THAT(f.load_error(), Catch::Contains("the optimizer entry has no name"));
  f.reset();
  f.edit_optimizer([](json& o) { o["name"] = "sgd"; });
  CHECK_THAT(f.load_error(),
             Catch::Contains("holds optimizer state 'adamw.m.blocks.0.attn.weight', "
                             "not named 'sgd.<buffer>.<parameter>'"));
  f.reset();
  f.edit_header([](json& h) { h["__metadata__"]["optimizer"] = "null"; });
  f.reseal();
  CHECK_THAT(f.load_error(), Catch::Contains("holds optimizer state 'adamw.m.blocks.0.attn.weight' "
                                             "but no optimizer entry"));
}

TEST_CASE("the loss scaler's fields are typed", "[checkpoint]") {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"scale", "big"}, {"good_steps", 0}}, "needs a number 'scale' > 0"},
      {{{"scale", -1.0}, {"good_steps", 0}}, "needs a number 'scale' > 0"},
      {{{"scale", 1024.0}, {"good_steps", 0.5}}, "good_steps is not an integer"},
      {{{"scale", 1024.0}, {"good_steps", -1}}, "good_steps -1 is outside [0, 2^40]"},
      {{{"scale", 1024.0}, {"good_steps", 0}, {"skipped_steps", 9}},
       "the loss scaler skipped 9 steps of 3"},
      {json::array(), "needs a number 'scale' > 0"},
  };
  for (const auto& [scaler, says] : cases) {
    Fixture f;
    const json& edited = scaler;  // clang < 16 cannot capture a structured binding
    f.edit_optimizer([&](json& o) { o["loss_scaler"] = edited; });
    CAPTURE(scaler.dump());
    CHECK_THAT(f.load_error(), Catch::Contains(says));
  }
  Fixture f;
  f.edit_optimizer([](json& o) {
    o["loss_scaler"] = {{"scale", 1024.0}, {"good_steps", 2}, {"skipped_steps", 1}};
  });
  CHECK(f.load_error() == "");
}

TEST_CASE("optimizer state that does not match the parameters is refused", "[checkpoint]") {
  Fixture f;
  // A state tensor for a parameter the file lacks (renamed; the kinds follow the name).
  f.edit_header([](json& h) {
    const std::string old_name = "adamw.v.blocks.0.attn.bias";
    const std::string new_name = "adamw.v.blocks.9.attn.bias";
    h[new_name] = h[old_name];
    h.erase(old_name);
    json kinds = json::parse(h["__metadata__"]["kinds"].get<std::string>());
    kinds.erase(old_name);
    kinds[new_name] = "optimizer_state";
    h["__metadata__"]["kinds"] = kinds.dump();
  });
  f.reseal();
  CHECK_THAT(f.load_error(), Catch::Contains("holds optimizer state 'adamw.v.blocks.9.attn.bias', "
                                             "not named 'adamw.<buffer>.<parameter>'"));
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

}  // namespace test_checkpoint_hostile
