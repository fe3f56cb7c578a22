#include "lessons/cli.h"

#include <cstdlib>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include "core/runtime/allocator.h"
#include "core/runtime/input_file.h"
#include "core/runtime/profile.h"
#include "lessons/grade.h"
#include "lessons/lesson.h"
#include "lessons/plan.h"
#include "lessons/viz_command.h"

namespace mgpu::lessons {

int cmd_calibrate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int cmd_validate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int cmd_analyze(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

namespace {

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
  return run_lesson_command(all_lessons(), args, out, err);
}

}  // namespace

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
