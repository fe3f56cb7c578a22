// Hostile command lines (issue #18, items 4-7): NaN, infinities, negative and absurd values,
// sizes the host cannot hold, unwritable outputs and bad profiles are one clear line and exit 2,
// before any training.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <sys/resource.h>
#include <unistd.h>

#include "mgpu_cli.h"

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
