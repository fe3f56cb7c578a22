#include "lessons/cli.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "core/comm/comm.h"
#include "core/runtime/allocator.h"
#include "core/runtime/input_file.h"
#include "core/runtime/profile.h"
#include "exercises/selection.h"
#include "lessons/grade.h"
#include "lessons/lesson.h"
#include "lessons/plan.h"
#include "lessons/viz_command.h"

namespace mgpu::lessons {

int cmd_calibrate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int cmd_validate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int cmd_analyze(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

namespace {

// Above the lesson's header, when any exercise runs the student's code: which ones, so a student
// knows what the figures below measure. Nothing for the default (every exercise the reference).
void print_student_code_line(std::ostream& out) {
  std::string mine;
  for (auto& choice : ex::installed_exercises())
    if (choice.installed == "mine") mine += (mine.empty() ? "" : ", ") + choice.name;
  bool asked = std::any_of(ex::installed_exercises().begin(), ex::installed_exercises().end(),
                           [](auto& c) { return c.installed == "mine" || c.fell_back; });
  if (asked)
    fmt::print(out, "your code (exercises/) runs: {}; every other exercise is the reference\n",
               mine.empty() ? "none yet" : mine);
}

int cmd_list(std::ostream& out) {
  fmt::print(out, "Lessons (run one with `mgpu run NAME`, options with `mgpu run NAME --help`):\n");
  for (auto& lesson : all_lessons())
    fmt::print(out, "  {:<18} {}\n", lesson->name(), lesson->summary());
  return 0;
}

// One line of a profile's efficiency model (its factors; the datasheet when every one is 1).
std::string efficiency_line(const HardwareProfile& p) {
  const Efficiency& e = p.efficiency;
  std::vector<std::string> tiles;
  for (const auto& [m, n] : e.gemm_tiles) tiles.push_back(fmt::format("{}x{}", m, n));
  return fmt::format(
      "GEMM ceiling {:.2f} fp32 / {:.2f} 2-byte, {} SMs, tiles {}; HBM {:.2f}; attention {}{}; "
      "links {:.2f} / {:.2f} of bandwidth; overlap slowdown {:.2f}",
      e.gemm_fp32, e.gemm_half, e.sm_count,
      tiles.empty() ? "none" : fmt::format("{}", fmt::join(tiles, " ")), e.hbm,
      e.fused_attention ? "fused" : "materialised",
      e.fused_attention ? fmt::format(" at {:.2f}", e.flash_fraction) : "", p.intra_node.efficiency,
      p.inter_node.efficiency, e.overlap_slowdown);
}

int cmd_profiles(std::ostream& out) {
  fmt::print(out, "Hardware profiles for the modeled clock (`--profile NAME` or a JSON file):\n");
  for (auto& name : HardwareProfile::preset_names()) {
    HardwareProfile p = HardwareProfile::load(name);
    fmt::print(out,
               "  {:<16} {:6.1f} TFLOP/s {} {:6.1f} {}  {:5.0f} GB/s HBM  {:>9}  {} per node: "
               "{} ({:.4g} GB/s), between: {} ({:.4g} GB/s)\n",
               p.name, p.peak_flops / 1e12, p.peak_label, p.peak_for(DType::bf16) / 1e12,
               p.peak_label_half, p.mem_bandwidth / 1e9, format_bytes(p.memory_capacity),
               p.ranks_per_node, p.intra_node.name, p.intra_node.bandwidth / 1e9, p.inter_node.name,
               p.inter_node.bandwidth / 1e9);
    fmt::print(out, "  {:<16} efficiency: {}\n", "", efficiency_line(p));
  }
  fmt::print(
      out,
      "\nEach efficiency factor and its source: docs/clock.md. A profile file looks like:\n{}\n",
      HardwareProfile::load("8xH100-NVLink").to_json().dump(2));
  return 0;
}

int cmd_run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  auto lessons = all_lessons();
  auto names = [&] {
    std::vector<std::string> n;
    for (auto& l : lessons) n.push_back(l->name());
    return fmt::format("{}", fmt::join(n, ", "));
  };
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    fmt::print(out, "usage: mgpu run LESSON [options]   (lessons: {})\n", names());
    return args.empty() ? kExitUsage : 0;
  }
  auto it =
      std::find_if(lessons.begin(), lessons.end(), [&](auto& l) { return l->name() == args[0]; });
  if (it == lessons.end())
    return usage_error(
        err, "run",
        fmt::format("unknown lesson '{}' (available: {})", echo_input(args[0], 80), names()));
  Lesson& lesson = **it;

  CLI::App app(lesson.summary(), "mgpu run " + lesson.name());
  app.footer(
      "The words the output uses (bubble, idle, modeled clock, MFU, busbw, ...): "
      "docs/glossary.md");
  app.option_defaults()->always_capture_default();
  CommonOptions common;
  add_common_options(app, common, lesson.defaults());
  lesson.add_options(app);
  bool done = false;
  int rc =
      parse_command(app, {args.begin() + 1, args.end()}, out, err, "run " + lesson.name(), done);
  if (done) return rc;

  try {
    const CLI::Option* ranks = app.get_option_no_throw("--ranks");
    apply_mpi_world_size(common, ranks && ranks->count() > 0);
    std::vector<std::string> given;
    for (const char* name : kModelShapeOptions)
      if (const CLI::Option* o = app.get_option_no_throw(name); o && o->count() > 0)
        given.emplace_back(name);
    apply_model_preset(common, given);
    common.run_config = resolved_run_config(lesson.name(), app, common);
    (void)common.fault_plan();  // an injected fault on a rank or step the run lacks: refused
    ex::select_impl(common.impl, out);
    print_student_code_line(out);
    return lesson.run(common, out);
  } catch (const UsageError& e) {
    return usage_error(err, "run " + lesson.name(), e.what());
  } catch (const RunConfigMismatch& e) {  // every process knows; rank 0 alone prints the table
    return e.reported() ? usage_error(err, "run " + lesson.name(), e.what()) : kExitUsage;
  } catch (const std::invalid_argument& e) {  // bad configs found by core (model, data, profile)
    return usage_error(err, "run " + lesson.name(), e.what());
  } catch (const OutOfMemory& e) {
    fmt::print(err, "mgpu run {}: error: {}\n", lesson.name(), e.what());
    fmt::print(err,
               "  (raise --capacity, pick a larger --profile, or shrink --batch/--dim/--layers)\n");
    return kExitUsage;
  } catch (const RankError& e) {
    // Re-classify by the original exception: a config problem found on a rank is still bad input.
    try {
      if (e.cause()) std::rethrow_exception(e.cause());
    } catch (const OutOfMemory& oom) {
      fmt::print(err, "mgpu run {}: error on rank {}: {}\n", lesson.name(), e.rank(), oom.what());
      fmt::print(
          err, "  (raise --capacity, pick a larger --profile, or shrink --batch/--dim/--layers)\n");
      return kExitUsage;
    } catch (const std::invalid_argument& bad) {
      return usage_error(err, "run " + lesson.name(),
                         fmt::format("rank {}: {}", e.rank(), bad.what()));
    } catch (...) {
    }
    fmt::print(err, "mgpu run {}: failed: {}\n", lesson.name(), e.what());
    return 1;
  } catch (const comm::CommError& e) {
    fmt::print(err, "mgpu run {}: communication error:\n{}\n", lesson.name(), e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(err, "mgpu run {}: failed: {}\n", lesson.name(), e.what());
    return 1;
  }
}

}  // namespace

namespace {

// Under mpirun every process of one program (an "app context": `mpirun -n 2 A : -n 2 B` has two)
// gets the same arguments, so bad input is reported once, by the first process of each program,
// not once per rank. Open MPI names the context and the sizes of all contexts.
bool reports_bad_input() {
  const char* app = std::getenv("OMPI_MCA_orte_app_num");
  const char* sizes = std::getenv("OMPI_APP_CTX_NUM_PROCS");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) return root_process();  // not Open MPI: only world rank 0 (PMI) narrates
  if (!app || !sizes) return std::string(rank) == "0";
  const int app_num = std::atoi(app);
  int first = 0;  // the world rank of this context's first process: the sizes before it
  std::istringstream list(sizes);
  int size = 0;
  for (int i = 0; i < app_num && list >> size; ++i) first += size;
  return std::atoi(rank) == first;
}

}  // namespace

int usage_error(std::ostream& err, const std::string& where, const std::string& what) {
  // One line of bounded length whatever the user typed (a message quotes at most ~200 characters
  // of any one input; this is the net for one that did not).
  constexpr size_t kMaxLine = 600;
  if (reports_bad_input())
    fmt::print(err, "mgpu{}: error: {}\n", where.empty() ? "" : " " + where,
               what.size() > kMaxLine ? what.substr(0, kMaxLine - 3) + "..." : what);
  return 2;
}

// CLI11 reports problems as exceptions; turn them into one line + exit 2 (help is exit 0).
int parse_command(CLI::App& app, std::vector<std::string> args, std::ostream& out,
                  std::ostream& err, const std::string& where, bool& done) {
  done = false;
  std::reverse(args.begin(), args.end());  // CLI11 consumes a reversed vector
  try {
    app.parse(args);
    return 0;
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    done = true;
    return 0;
  } catch (const CLI::ParseError& e) {
    done = true;
    return usage_error(err, where,
                       fmt::format("{} (see `mgpu {} --help`)", echo_input(e.what(), 300), where));
  }
}

int mgpu_main_quiet(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

int mgpu_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const char* usage =
      "mgpu — multi-GPU training lessons, run on real GPUs or CPU virtual GPUs\n\n"
      "usage:\n"
      "  mgpu list                      the lessons\n"
      "  mgpu run LESSON [options]      run one (see `mgpu run LESSON --help`)\n"
      "  mgpu viz [trace.json ...]      open traces in the dashboard (--screenshot out.png)\n"
      "  mgpu analyze TRACE...          explain a trace (own or PyTorch profiler) per rank, step\n"
      "  mgpu plan --model M --gpus N   which layout to train M on N GPUs (simulated)\n"
      "  mgpu profiles                  the hardware profiles of the modeled clock\n"
      "  mgpu grade [exNN] [--impl mine|reference]   score the exercises (docs/exercises)\n"
      "  mgpu calibrate [--device cuda|cpu] [--out FILE]   measure this GPU (or CPU), write a "
      "profile\n"
      "  mgpu validate [--json]         the modeled clock against published runs\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << usage;
    return args.empty() ? kExitUsage : 0;
  }
  // Under mpirun every process runs the same command; only world rank 0 narrates.
  if (const char* rank = std::getenv("OMPI_COMM_WORLD_RANK"); rank && std::string(rank) != "0") {
    static std::ostream null_stream(nullptr);
    return mgpu_main_quiet(args, null_stream, err);
  }
  return mgpu_main_quiet(args, out, err);
}

int mgpu_main_quiet(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string& cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  // `list` and `profiles` take no arguments: anything after them is a mistake, not ignored.
  if ((cmd == "list" || cmd == "profiles") && !rest.empty())
    return usage_error(err, cmd,
                       fmt::format("takes no arguments, got '{}'", rest[0].substr(0, 40)));
  if (cmd == "list") return cmd_list(out);
  if (cmd == "profiles") return cmd_profiles(out);
  if (cmd == "run") return cmd_run(rest, out, err);
  if (cmd == "viz") return cmd_viz(rest, out, err);
  if (cmd == "grade") return cmd_grade(rest, out, err);
  if (cmd == "calibrate") return cmd_calibrate(rest, out, err);
  if (cmd == "validate") return cmd_validate(rest, out, err);
  if (cmd == "plan") return cmd_plan(rest, out, err);
  if (cmd == "analyze") return cmd_analyze(rest, out, err);
  return usage_error(
      err, "",
      fmt::format("unknown command '{}' (use list, run, plan, viz, analyze, profiles, "
                  "grade, calibrate or validate)",
                  echo_input(cmd, 80)));
}

}  // namespace mgpu::lessons
