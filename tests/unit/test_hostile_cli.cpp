// Hostile command lines (issue #18, items 4-7): NaN, infinities, negative and absurd values,
// sizes the host cannot hold, unwritable outputs and bad profiles are one clear line and exit 2,
// before any training.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <sys/resource.h>
#include <unistd.h>

#include "core/model/model_file.h"
#include "lessons/lesson.h"
#include "mgpu_cli.h"

namespace test_hostile_cli {

using mgpu::testing::count_lines;
using mgpu::testing::run_mgpu;
using mgpu::testing::with_tiny_model;
using Result = mgpu::testing::CliResult;
namespace fs = std::filesystem;

namespace {

// Exit 2, one line on stderr saying `says`, nothing trained (no loss printed).
void check_refused(const std::vector<std::string>& args, const std::string& says) {
  Result r = run_mgpu(args);
  CAPTURE(args, r.err);
  CHECK(r.code == 2);
  CHECK(count_lines(r.err) == 1);
  CHECK(r.err.size() < 400);  // a short number, never a 309-digit bound or a 100k name
  CHECK_THAT(r.err, Catch::Contains(says));
  CHECK_THAT(r.out, !Catch::Contains("loss"));
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("mgpu_hostile_" + std::to_string(::getpid()) + name))
      .string();
}

}  // namespace

TEST_CASE("NaN and infinities are refused by every numeric option", "[cli][hostile]") {
  check_refused({"run", "single_device", "--lr", "nan"}, "--lr: 'nan' is not a finite number");
  check_refused({"run", "single_device", "--lr", "inf"}, "--lr: 'inf' is not a finite number");
  check_refused({"run", "single_device", "--lr", "-1"}, "--lr: -1 must be greater than 0");
  check_refused({"run", "single_device", "--comm-timeout", "nan"}, "--comm-timeout: 'nan'");
  check_refused({"run", "single_device", "--comm-timeout", "1e300"},
                "1e300 must be from 0.1 to 86400 s");
  check_refused({"grade", "--timeout", "nan"}, "--timeout: 'nan' is not a finite number");
  check_refused({"grade", "--timeout", "1e300"}, "--timeout: 1e300 is above 86400");
  check_refused({"run", "single_device", "--capacity", "1e400GiB"}, "size '1e400GiB' is beyond");
  check_refused({"run", "collectives", "--iters", "nan"}, "--iters: 'nan'");
}

TEST_CASE("range errors print the value as typed, not a 309-digit bound", "[cli][hostile]") {
  Result r = run_mgpu({"run", "single_device", "--dim", "-4"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--dim: -4 must be at least 1 element"));
  CHECK(r.err.size() < 200);
}

TEST_CASE("negative seeds and stages are refused", "[cli][hostile]") {
  check_refused({"run", "single_device", "--seed", "-1"}, "--seed: -1 must be 0 or more");
  check_refused({"run", "pipeline", "--stages", "-1"}, "--stages: -1 must be at least 1 stage");
}

// Issue #33 item 7: every number is range-checked with its unit in the message.
TEST_CASE("count and range errors name their unit", "[cli][hostile]") {
  check_refused({"run", "single_device", "--steps", "0"}, "--steps: 0 must be at least 1 step");
  check_refused({"run", "single_device", "--batch", "0"}, "--batch: 0 must be at least 1 sequence");
  check_refused({"run", "single_device", "--ranks", "0"}, "--ranks: 0 must be from 1 to 64 ranks");
  check_refused({"run", "hybrid", "--microbatches", "0"},
                "--microbatches: 0 must be at least 1 micro-batch");
  check_refused({"run", "zero", "--stage", "4"}, "--stage: 4 must be from 0 to 3 (the ZeRO stage)");
  check_refused({"plan", "--model", "tiny", "--gpus", "0"}, "--gpus: 0 must be from 1 to");
  check_refused({"plan", "--model", "tiny", "--gpus", "8", "--tp", "0"},
                "--tp: 0 must be from 1 to 1048576 ranks");
  check_refused({"viz", "x.json", "--width", "10"}, "--width: 10 must be from 200 to 8192 pixels");
}

TEST_CASE("list and profiles take no arguments", "[cli][hostile]") {
  check_refused({"profiles", "--bogus"}, "mgpu profiles: error: takes no arguments, got '--bogus'");
  check_refused({"list", "extra"}, "mgpu list: error: takes no arguments, got 'extra'");
}

TEST_CASE("an unwritable --trace or --checkpoint is refused before training", "[cli][hostile]") {
  const std::string folder = temp_path("_folder");
  fs::create_directories(folder);
  check_refused(with_tiny_model({"run", "single_device", "--checkpoint", folder}),
                "--checkpoint: '" + folder + "' is a folder, not a regular file");
  CHECK(fs::is_directory(folder));
  check_refused(with_tiny_model({"run", "single_device", "--trace", folder + "/no/such/t.json"}),
                "does not exist");
  if (fs::is_character_file("/dev/full")) {
    check_refused(with_tiny_model({"run", "single_device", "--checkpoint", "/dev/full"}),
                  "'/dev/full' is a character device, not a regular file");
    check_refused(with_tiny_model({"run", "ddp", "--trace", "/dev/full"}),
                  "'/dev/full' is a character device");
    CHECK(fs::is_character_file("/dev/full"));
  }
  fs::remove_all(folder);
}

TEST_CASE("profiles with zero peaks, folders and huge names are refused", "[cli][hostile]") {
  const std::string file = temp_path("_profile.json");
  auto with_profile = [&](const std::string& json) {
    std::ofstream(file) << json;
    return with_tiny_model({"run", "single_device", "--profile", file});
  };
  const std::string link = R"("intra_node": {"bandwidth_GBps": 100, "latency_us": 1})";
  check_refused(with_profile(R"({"peak_TFLOPs": 0, "mem_bandwidth_GBps": 100, )" + link + "}"),
                "profile: peak_TFLOPs must be >= 0.0001");
  check_refused(with_profile(R"({"peak_TFLOPs": 10, "mem_bandwidth_GBps": 0, )" + link + "}"),
                "profile: mem_bandwidth_GBps must be >= 0.001");
  check_refused(with_profile(R"({"peak_TFLOPs": 10, "mem_bandwidth_GBps": 1, "intra_node": )"
                             R"({"bandwidth_GBps": 0, "latency_us": 1}})"),
                "profile: intra_node.bandwidth_GBps must be >= 0.001");
  check_refused(with_profile(R"({"peak_TFLOPs": "fast", "mem_bandwidth_GBps": 1, )" + link + "}"),
                "profile: peak_TFLOPs must be a number");
  check_refused(with_profile(R"({"peak_TFLOPs": 1, "mem_bandwidth_GBps": 1, )"
                             R"("memory_capacity_GiB": 1e30, )" +
                             link + "}"),
                "memory_capacity_GiB must be >= 0 and at most");
  check_refused(with_profile("[1, 2]"), "profile: the JSON must be an object");
  fs::remove(file);
  check_refused(with_tiny_model({"run", "single_device", "--profile", "/tmp"}),
                "--profile '/tmp' is a folder, not a regular file");
  check_refused(with_tiny_model({"run", "single_device", "--profile", std::string(100000, 'x')}),
                "unknown profile 'xxx");
}

namespace {
int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}
}  // namespace

TEST_CASE("sizes the host cannot hold are refused with the breakdown before allocating",
          "[cli][hostile][host_memory]") {
  // Each of these allocated until the kernel's OOM killer ended it (~24 GB, 30-50 s). Now: one
  // line naming what each category would take and what fits, exit 2, and this process's peak
  // memory does not grow by more than a small run's.
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {{"run", "single_device", "--batch", "100000000"},
       {"--batch 100000000 needs about", "activations", "workspace", "data",
        "the largest --batch that fits is"}},
      {{"run", "single_device", "--layers", "1000000"},
       {"this model needs about", "parameters", "optimizer_state", "at most --layers"}},
      {{"run", "collectives", "--max-bytes", "100GiB"},
       {"--max-bytes 100.00 GiB over 4 rank(s) needs about", "comm_buffers", "use --max-bytes"}},
  };
  const int64_t rss_before = peak_rss_bytes();
  for (const Case& k : cases) {
    Result r = run_mgpu(k.args);
    CAPTURE(k.args, r.err);
    CHECK(r.code == 2);
    CHECK(count_lines(r.err) == 1);
    for (const std::string& s : k.says) CHECK_THAT(r.err, Catch::Contains(s));
    CHECK_THAT(r.out, !Catch::Contains("loss"));
  }
  CHECK(peak_rss_bytes() - rss_before < (int64_t{256} << 20));
}

// Issue #51, round three: options the MoE features accepted and ignored, and numbers whose range
// was checked before conversion (or not at all).
TEST_CASE("typed MoE options override a --model preset or file, as --layers does",
          "[cli][hostile][model]") {
  Result moe8 =
      run_mgpu({"run", "single_device", "--model", "tiny-moe", "--experts", "8", "--steps", "1"});
  CHECK(moe8.code == 0);
  CHECK_THAT(moe8.out, Catch::Contains("8 experts top-2"));
  Result dense =
      run_mgpu({"run", "single_device", "--model", "tiny", "--experts", "4", "--steps", "1"});
  CHECK(dense.code == 0);
  CHECK_THAT(dense.out, Catch::Contains("4 experts top-1"));
  const std::string file = temp_path("moe_model.json");
  std::ofstream(file) << R"({"layers": 4, "dim": 16, "heads": 2, "seq": 8, "experts": 4,
      "top_k": 2, "moe_every": 2, "capacity_factor": 1.5, "aux_loss_coef": 0.5})";
  Result typed = run_mgpu({"run", "single_device", "--model", file, "--top-k", "1", "--moe-every",
                           "1", "--steps", "1"});
  CHECK(typed.code == 0);
  CHECK_THAT(typed.out, Catch::Contains("4 experts top-1 ("));  // not "every 2 blocks"
  fs::remove(file);
}

TEST_CASE("one rule: every model-file field is set by its typed option, which overrides it",
          "[cli][hostile][model]") {
  using mgpu::lessons::kModelShapeOptions;
  auto option_of = [](std::string field) {
    std::replace(field.begin(), field.end(), '_', '-');
    return "--" + field;
  };
  auto in_rule = [&](const std::string& option) {
    return std::find(std::begin(kModelShapeOptions), std::end(kModelShapeOptions), option) !=
           std::end(kModelShapeOptions);
  };
  for (const auto& range : mgpu::kModelFieldRanges) {
    if (std::string(range.key) == "expert_hidden") continue;  // a file-only field: no option
    CHECK(in_rule(option_of(range.key)));
  }
  for (const char* field : {"tie_embeddings", "capacity_factor", "aux_loss_coef"})
    CHECK(in_rule(option_of(field)));
  // Each option of the rule wins over the file's value.
  const std::string file = temp_path("rule_model.json");
  std::ofstream(file) << R"({"layers": 4, "dim": 32, "heads": 4, "seq": 16, "vocab": 100,
      "tie_embeddings": true, "experts": 4, "top_k": 2, "moe_every": 2,
      "capacity_factor": 1.5, "aux_loss_coef": 0.5})";
  const std::vector<std::string> all(std::begin(kModelShapeOptions), std::end(kModelShapeOptions));
  mgpu::lessons::CommonOptions typed;
  typed.model = file;
  typed.layers = 2, typed.dim = 8, typed.heads = 1, typed.seq = 4, typed.vocab = 70;
  typed.tie_embeddings = "off", typed.experts = 8, typed.top_k = 1, typed.moe_every = 1;
  typed.capacity_factor = "2", typed.aux_loss_coef = 0.25;
  mgpu::lessons::CommonOptions c = typed;
  mgpu::lessons::apply_model_preset(c, all);
  CHECK(std::tie(c.layers, c.dim, c.heads, c.seq, c.vocab, c.tie_embeddings, c.experts, c.top_k,
                 c.moe_every, c.capacity_factor, c.aux_loss_coef) ==
        std::tie(typed.layers, typed.dim, typed.heads, typed.seq, typed.vocab, typed.tie_embeddings,
                 typed.experts, typed.top_k, typed.moe_every, typed.capacity_factor,
                 typed.aux_loss_coef));
  mgpu::lessons::CommonOptions from_file = typed;  // nothing typed: the file's values
  mgpu::lessons::apply_model_preset(from_file, {});
  CHECK(std::tie(from_file.layers, from_file.experts, from_file.moe_every,
                 from_file.capacity_factor,
                 from_file.aux_loss_coef) == std::make_tuple(4, 4, 2, std::string("1.5"), 0.5));
  fs::remove(file);
}

TEST_CASE("MoE numbers and derived sizes are refused in one line", "[cli][hostile][model]") {
  check_refused({"run", "single_device", "--experts", "4", "--moe-every", "100"},
                "moe_every (100) is above the 2 layers, so no block would be MoE");
  check_refused({"run", "single_device", "--experts", "4", "--capacity-factor", "1e18"},
                "--capacity-factor: 1e18 is above 1000000");
  check_refused({"run", "single_device", "--experts", "4", "--aux-loss-coef", "3e38"},
                "--aux-loss-coef 3e+38 is above 1000");
  check_refused({"run", "single_device", "--experts", "4", "--aux-loss-coef", "1e39"},
                "--aux-loss-coef 1e+39 is above 1000");
  check_refused({"run", "expert_parallel", "--skew", "nan"}, "--skew: 'nan' is not a finite");
  check_refused({"run", "expert_parallel", "--ep", "0"}, "--ep: 0 must be at least 1 rank");
  check_refused({"run", "single_device", "--seed", "99999999999999999999"},
                "--seed: 99999999999999999999 is above 18446744073709551615");
  check_refused({"grade", ""}, "unknown exercise ''");
  // A model file's values meet the same bounds, in the planner too.
  const std::string file = temp_path("moe_every.json");
  std::ofstream(file) << R"({"layers": 2, "dim": 16, "heads": 2, "seq": 8, "experts": 4,
      "moe_every": 10000})";
  check_refused({"plan", "--model", file, "--gpus", "8"}, "moe_every (10000) is above the 2");
  std::ofstream(file) << R"({"layers": 2, "dim": 16, "heads": 2, "seq": 8, "experts": 4,
      "aux_loss_coef": 1e300})";
  check_refused({"run", "single_device", "--model", file}, "is above 1000");
  fs::remove(file);
}

TEST_CASE("resuming across dense and MoE names the experts", "[cli][hostile][checkpoint]") {
  const std::string ckpt = temp_path("dense.ckpt");
  REQUIRE(run_mgpu(with_tiny_model({"run", "single_device", "--checkpoint", ckpt})).code == 0);
  check_refused({"run", "single_device", "--resume", ckpt, "--steps", "4", "--dim", "16", "--heads",
                 "2", "--seq", "8", "--experts", "4"},
                "a model with experts 0, but this run's has experts 4: resume with --experts 0");
  fs::remove(ckpt);
}

TEST_CASE("output targets a write would fail on are refused before any work",
          "[cli][hostile][output]") {
  const fs::path dir = temp_path("_outputs");
  fs::create_directories(dir);
  fs::create_symlink(dir / "loop_b", dir / "loop_a");
  fs::create_symlink(dir / "loop_a", dir / "loop_b");
  fs::create_symlink("/nonexistent_mgpu_folder/x.ckpt", dir / "dangling");
  const std::string loop = (dir / "loop_a").string(), dangling = (dir / "dangling").string();
  check_refused({"run", "single_device", "--checkpoint", loop}, "is a symbolic link that loops");
  check_refused({"run", "single_device", "--trace", dangling},
                "cannot be created: folder '/nonexistent_mgpu_folder' does not exist");
  check_refused({"run", "single_device", "--checkpoint", "/proc/version"},
                "'/proc/version' cannot be written in folder '/proc'");
  check_refused({"run", "single_device", "--checkpoint", (dir / std::string(300, 'a')).string()},
                "File name too long");
  check_refused({"calibrate", "--device", "cpu", "--out", "/dev/full"},
                "--out: '/dev/full' is a character device, not a regular file");
  check_refused({"calibrate", "--device", "cpu", "--out", "/proc/version"},
                "cannot be written in folder '/proc'");
  // A link to a file that can be written is followed: the file is written, the link kept.
  fs::create_symlink(dir / "real.json", dir / "good_link");
  Result r = run_mgpu({"run", "single_device", "--steps", "1", "--dim", "16", "--heads", "2",
                       "--seq", "8", "--trace", (dir / "good_link").string()});
  CHECK(r.code == 0);
  CHECK(fs::is_symlink(dir / "good_link"));
  CHECK(fs::file_size(dir / "real.json") > 0);
  fs::remove_all(dir);
}

TEST_CASE("a file that cannot be a checkpoint is refused from its first bytes",
          "[cli][hostile][checkpoint]") {
  const std::string sparse = temp_path("sparse.ckpt");
  {
    std::ofstream(sparse).put('\0');
    fs::resize_file(sparse, uint64_t{20} << 30);  // 20 GiB of zeros, sparse: no disk used
  }
  check_refused({"run", "single_device", "--resume", sparse},
                "is not an mgpu checkpoint (not a safetensors file)");
  fs::remove(sparse);
}

TEST_CASE("float options beyond a float's range and switches given numbers are refused",
          "[cli][hostile]") {
  check_refused({"run", "single_device", "--lr", "1e300"},
                "--lr: 1e300 is beyond a float's range (3.40282e+38)");
  check_refused({"run", "single_device", "--weight-decay", "1e39"},
                "--weight-decay: 1e39 is beyond a float's range");
  check_refused({"run", "ddp", "--overlap", "-1"}, "--overlap: '-1' is not on or off");
  check_refused({"run", "zero", "--stage", "3", "--prefetch", "-1"},
                "--prefetch: '-1' is not on or off");
}

}  // namespace test_hostile_cli
