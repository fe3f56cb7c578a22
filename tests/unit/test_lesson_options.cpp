// Every option a training lesson accepts is honoured or refused: the test walks each lesson's
// option list as CLI11 builds it (so a new option is walked automatically), runs the lesson with
// a non-default value, and checks that the printed report (wall-clock lines aside), the trace's
// events or the checkpoint's tensors change, or that the run is refused with exit code 2.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include "core/model/checkpoint.h"
#include "lessons/lesson.h"
#include "unit/mgpu_cli.h"

namespace test_lesson_options {

using mgpu::testing::run_mgpu;

namespace {

namespace fs = std::filesystem;

// Per process: two checkouts running this test at once must not share (or delete) its files.
const fs::path kDir =
    fs::temp_directory_path() / ("mgpu_test_lesson_options." + std::to_string(::getpid()));
const std::string kTrace = (kDir / "run.json").string();
const std::string kCheckpoint = (kDir / "run.ckpt").string();

// Options that cannot show a difference in a short healthy run, and where they are tested.
const std::map<std::string, std::string> kExempt = {
    {"--help", "prints the help"},
    {"--comm-timeout", "only acts when a rank is stuck: tests/unit/test_comm_diagnosis.cpp"},
    {"--viz", "opens a window: tests/viz"},
    {"--impl", "picks exercise implementations: tests/grade and the exercises' --impl tests"},
    {"--fail-rank", "ends the job on purpose (one line, exit 1): tests/unit/test_faults.cpp"},
    {"--checkpoint-every",
     "writes the same file at earlier steps too: tests/unit/test_faults.cpp "
     "resumes from one"},
};

// A non-default value for each option (lesson-specific ones included).
const std::map<std::string, std::vector<std::string>> kTry = {
    {"--ranks", {"3"}},
    {"--slow-rank", {"0:2"}},
    {"--slow-link", {"0-1:4"}},
    {"--jitter", {"5"}},
    {"--checkpoint-cost", {"30"}},
    {"--mtbf-hours", {"1"}},
    {"--device", {"phantom"}},
    {"--clock", {"wall"}},
    {"--profile", {"4xA100-PCIe"}},
    {"--capacity", {"64KiB"}},
    {"--impl", {"mine"}},
    {"--layers", {"6"}},
    {"--dim", {"32"}},
    {"--heads", {"4"}},
    {"--seq", {"12"}},
    {"--model", {"gpt2-small"}},  // the typed sizes win; its 50257-token vocabulary remains
    {"--vocab", {"100"}},
    {"--tie-embeddings", {"on"}},
    {"--kv-heads", {"1"}},  // the 2 query heads share one: another model (or tp 2 refused)
    {"--ffn-dim", {"24"}},
    {"--experts", {"4"}},
    {"--top-k", {"2"}},  // without --experts: refused
    {"--moe-every", {"2"}},
    {"--capacity-factor", {"1.25"}},
    {"--aux-loss-coef", {"0.1"}},
    {"--steps", {"4"}},
    {"--batch", {"24"}},
    {"--task", {"reverse"}},
    {"--data", {MGPU_SOURCE_DIR "/README.md"}},
    {"--optimizer", {"sgd"}},
    {"--lr", {"0.01"}},
    {"--weight-decay", {"0.3"}},
    {"--seed", {"7"}},
    {"--resume", {"/nonexistent/run.ckpt"}},
    {"--precision", {"bf16"}},
    {"--recompute", {"full"}},
    {"--log-every", {"2"}},
    {"--quiet", {}},
    {"--overlap", {"off"}},
    {"--bucket-mb", {"0.001"}},
    {"--accum", {"3"}},
    {"--batch-per-rank", {"2"}},
    {"--schedule", {"gpipe"}},
    {"--microbatches", {"2"}},
    {"--virtual-stages", {"2"}},
    {"--stages", {"2"}},
    {"--theory", {}},
    {"--stage", {"1"}},
    {"--prefetch", {"off"}},
    {"--paper", {}},
    {"--cp", {"4"}},
    {"--cp-layout", {"contiguous"}},
    {"--compare", {"off"}},
    {"--dp", {"1"}},  // hybrid: with the default tp 2 x pp 2 on 8 ranks, refused
    {"--tp", {"1"}},
    {"--pp", {"4"}},
    {"--zero", {"1"}},               // hybrid: ZeRO-1 over dp
    {"--ep", {"2"}},                 // expert_parallel: 2 GPUs per expert group
    {"--sp", {}},                    // hybrid: Megatron-SP in the tp 2 blocks
    {"--vocab-parallel-head", {}},   // hybrid: lm_head split over tp
    {"--tp-sums", {"activations"}},  // hybrid: refused in fp32 (the activations' type is fp32)
    {"--skew", {"8"}},
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What a run shows: its exit code, the report without wall-clock lines, the trace's events (the
// metadata repeats the options, so it would always differ) and the checkpoint's tensors.
struct Observed {
  int code = 0;
  std::string report, events, tensors;
};

Observed observe(std::vector<std::string> args) {
  fs::remove(kTrace);
  fs::remove(kCheckpoint);
  auto r = run_mgpu(args);
  Observed o{r.code, "", "", ""};
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.find("wall") == std::string::npos && line.find("this machine") == std::string::npos)
      o.report += line + "\n";
  std::string trace = read(kTrace);
  if (auto at = trace.find("\"traceEvents\""); at != std::string::npos) o.events = trace.substr(at);
  if (fs::exists(kCheckpoint))
    for (auto& t : mgpu::load_checkpoint_tensors(kCheckpoint).tensors)
      o.tensors += t.name + std::string(reinterpret_cast<const char*>(t.values.data()),
                                        t.values.size() * sizeof(float));
  return o;
}

// The lessons that compare several single-rank runs side by side (lessons/training.h:
// train_measured): no trace or checkpoint to observe, so only their report is compared, and
// --trace/--checkpoint must be refused.
bool writes_no_outputs(const std::string& lesson) {
  return lesson == "mixed_precision" || lesson == "activation_checkpointing" || lesson == "faults";
}

std::vector<std::string> base_args(const std::string& lesson) {
  std::vector<std::string> a = {"run",     lesson, "--steps", "3", "--layers", "4", "--dim", "16",
                                "--heads", "2",    "--seq",   "8", "--batch",  "12"};
  if (!writes_no_outputs(lesson))
    a.insert(a.end(), {"--trace", kTrace, "--checkpoint", kCheckpoint});
  if (lesson == "pipeline") a.insert(a.end(), {"--microbatches", "4"});
  if (lesson == "grad_accum") a.insert(a.end(), {"--accum", "2"});
  if (lesson == "hybrid") a.insert(a.end(), {"--microbatches", "3"});      // 12 = dp 2 x 3 x 2
  if (lesson == "expert_parallel") a.insert(a.end(), {"--experts", "8"});  // its model has experts
  return a;
}

// The options as `mgpu run LESSON` registers them.
std::vector<std::string> option_names(mgpu::lessons::Lesson& lesson) {
  CLI::App app;
  mgpu::lessons::CommonOptions common;
  mgpu::lessons::add_common_options(app, common, lesson.defaults());
  lesson.add_options(app);
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    std::string name = o->get_name();  // "--ranks,-n" -> "--ranks"
    if (auto comma = name.find(','); comma != std::string::npos) name = name.substr(0, comma);
    names.push_back(name);
  }
  return names;
}

// `args` with `option value` set: replaces the value when the base already has the option.
std::vector<std::string> with_option(std::vector<std::string> args, const std::string& option,
                                     const std::vector<std::string>& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == option && !value.empty()) {
      args[i + 1] = value[0];
      return args;
    }
  args.push_back(option);
  args.insert(args.end(), value.begin(), value.end());
  return args;
}

}  // namespace

TEST_CASE("every option of every training lesson changes the run or is refused with exit 2",
          "[lesson][options]") {
  fs::create_directories(kDir);
  struct RemoveDir {
    ~RemoveDir() { fs::remove_all(kDir); }
  } remove_dir;
  for (auto& lesson : mgpu::lessons::all_lessons()) {
    if (!lesson->defaults().model_options) continue;  // collectives: not a training lesson
    const std::string name = lesson->name();
    const Observed base = observe(base_args(name));
    INFO(name);
    REQUIRE(base.code == 0);
    REQUIRE((writes_no_outputs(name) || !base.tensors.empty()));
    for (const std::string& option : option_names(*lesson)) {
      if (kExempt.count(option)) continue;
      if ((option == "--trace" || option == "--checkpoint") && writes_no_outputs(name)) {
        INFO(name << " " << option);
        CHECK(observe(with_option(base_args(name), option,
                                  {option == "--trace" ? kTrace : kCheckpoint}))
                  .code == 2);
        continue;
      }
      if (option == "--trace" || option == "--checkpoint") {  // outputs: the base run wrote them
        CHECK(!(option == "--trace" ? base.events : base.tensors).empty());
        continue;
      }
      INFO(name << " " << option);
      auto it = kTry.find(option);
      REQUIRE(it != kTry.end());  // a new option needs a value to try here
      const Observed run = observe(with_option(base_args(name), option, it->second));
      const bool changed = run.code != base.code || run.report != base.report ||
                           run.events != base.events || run.tensors != base.tensors;
      const bool refused = run.code == 2;
      CHECK((changed || refused));
      if (run.code != 0) CHECK(refused);  // never a crash: a refusal is exit 2
    }
  }
}

// Under mpirun the processes compare this configuration before the first step (issue #33): the
// same values spelled differently must agree, different values must not.
TEST_CASE("the run configuration compares values and not their spelling",
          "[lesson][options][mpi]") {
  auto resolved = [](const std::vector<std::string>& args) {
    CLI::App app;
    mgpu::lessons::CommonOptions common;
    mgpu::lessons::add_common_options(app, common, {});
    std::vector<std::string> reversed(args.rbegin(),
                                      args.rend());  // CLI11 parses a reversed vector
    app.parse(reversed);
    return mgpu::lessons::resolved_run_config("ddp", app, common);
  };
  CHECK(resolved({"--lr", "0.1", "--seed", "7"}) == resolved({"--lr", "1e-1", "--seed", "0x7"}));
  CHECK(resolved({"--seed", "010"}) != resolved({"--seed", "10"}));  // CLI11 reads 010 as octal 8
  CHECK(resolved({"--lr", "0.0010"}) == resolved({"--lr", "1e-3"}));
  CHECK(resolved({"--lr", "0.1"}) != resolved({"--lr", "0.2"}));
  CHECK(resolved({"--precision", "bf16"}) != resolved({"--precision", "fp16"}));
}

// Issue #51: every value-taking option of every lesson, given NaN, an infinity, a huge value,
// zero and a negative, is refused in one line (exit 2) or runs (exit 0); NaN, an infinity and a
// negative are never taken. Walked from CLI11's option lists, so a new option is walked too.
TEST_CASE(
    "every option of every lesson refuses nan, inf and negatives, and 0 or 1e300 is refused "
    "or run",
    "[lesson][options][hostile]") {
  const std::set<std::string> not_numbers = {"--help", "--trace",     "--checkpoint", "--resume",
                                             "--data", "--model",     "--profile",    "--impl",
                                             "--viz",  "--screenshot"};
  for (auto& lesson : mgpu::lessons::all_lessons()) {
    const std::string name = lesson->name();
    std::vector<std::string> base = {"run", name};
    if (name == "collectives")
      base.insert(base.end(), {"--ranks", "2", "--max-bytes", "64KiB", "--iters", "1"});
    else if (lesson->defaults().model_options)
      base.insert(base.end(), {"--steps", "1", "--layers", "4", "--dim", "16", "--heads", "2",
                               "--seq", "8", "--batch", "12", "-q"});
    CLI::App app;
    mgpu::lessons::CommonOptions common;
    mgpu::lessons::add_common_options(app, common, lesson->defaults());
    lesson->add_options(app);
    for (const CLI::Option* o : app.get_options()) {
      std::string option = o->get_name();
      if (auto comma = option.find(','); comma != std::string::npos) option.resize(comma);
      if (o->get_expected_min() == 0 || not_numbers.count(option)) continue;  // a flag, or a file
      for (const std::string value : {"nan", "inf", "1e300", "0", "-1"}) {
        std::vector<std::string> args = base;
        args.insert(args.end(), {option, value});
        const auto r = run_mgpu(args);
        INFO(name << " " << option << " " << value << ": exit " << r.code << ": " << r.err);
        if (r.code == 2) {
          CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
          CHECK(r.err.size() < 400);
        } else {
          CHECK(r.code == 0);
          CHECK((value == "0" || value == "1e300"));
        }
      }
    }
  }
}

}  // namespace test_lesson_options
