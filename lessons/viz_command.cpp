#include "lessons/viz_command.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>
#include <regex>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <CLI/CLI.hpp>

#include "core/runtime/input_file.h"
#include "core/trace/chrome_trace.h"
#include "exercises/selection.h"
#include "lessons/classroom.h"
#include "lessons/cli.h"
#include "lessons/validate.h"

#ifdef MGPU_HAVE_VIZ
#include "viz/dashboard.h"
#endif

namespace mgpu::lessons {

#ifdef MGPU_HAVE_VIZ

namespace {

// "0.2ms..0.6ms" (units s, ms, us on both ends) -> seconds; nothing when it does not read so.
std::optional<viz::TimeWindow> parse_time_window(const std::string& text) {
  static const std::regex form(R"(^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us)\s*\.\.)"
                               R"(\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us)\s*$)");
  std::smatch m;
  if (!std::regex_match(text, m, form)) return std::nullopt;
  auto seconds = [](const std::string& value, const std::string& unit) {
    const double scale = unit == "s" ? 1.0 : unit == "ms" ? 1e-3 : 1e-6;
    return std::stod(value) * scale;
  };
  viz::TimeWindow w;
  try {
    w = {seconds(m[1], m[2]), seconds(m[3], m[4])};
  } catch (const std::out_of_range&) {  // 1e999ms
    return std::nullopt;
  }
  // Within a trace's longest span: a ruler labelled in 300-digit seconds teaches nothing.
  if (!(w.from < w.to) || !(w.to <= trace::kMaxTraceSpan)) return std::nullopt;
  return w;
}

// What `mgpu viz` was asked, as parsed.
struct VizArgs {
  std::vector<std::string> paths;
  viz::VizCliOptions opt;
  std::string layout = "columns";
  std::string memory = "all";
  std::string zoom;
  ClassroomOptions classroom;
};

void add_viz_options(CLI::App& app, VizArgs& a) {
  viz::VizCliOptions& opt = a.opt;
  app.add_option("traces", a.paths,
                 "trace JSON files written with --trace (two to six with --compare), or a "
                 "PyTorch profiler run: its files (one per rank, .json or .json.gz) or folder");
  app.add_option("--screenshot", opt.screenshot, "render one frame to this PNG and exit")
      ->check(OutputFile);  // refused before any work, like --checkpoint
  app.add_option("--width", opt.width, "window or screenshot width (default 1600)")
      ->check(InRange(200, 8192, "pixels"));
  app.add_option("--height", opt.height,
                 "screenshot height (default: as tall as the content, at most 4800)")
      ->check(InRange(200, 8192, "pixels"));
  app.add_flag("--presentation", opt.presentation, "large fonts and a high-contrast palette");
  app.add_flag("--compare", opt.compare,
               "show two to six traces on one time scale and memory scale, each from its step "
               "start");
  app.add_option("--layout", a.layout, "compared runs side by side (columns) or stacked (rows)")
      ->check(CLI::IsMember({"columns", "rows"}));
  app.add_option("--title", opt.title, "window title");
  app.add_option("--highlight", opt.highlight,
                 "highlight one communication group's events (e.g. tp1, dp0, pp0, world; the "
                 "hybrid lesson prints its groups)");
  app.add_option("--memory", a.memory,
                 "memory strips: all categories, or model-states (parameters, gradients, "
                 "optimizer state on their own scale: ZeRO's shards), or off (no strips)")
      ->check(CLI::IsMember({"all", "model-states", "off"}));
  app.add_option("--zoom", a.zoom,
                 "start zoomed in on this part of the shown step, e.g. 0.2ms..0.6ms (the ruler's "
                 "times: 0 is the step's start; units s, ms, us); \"Fit\" shows it all again");
  app.add_option("--set", a.classroom.settings,
                 "classroom mode: set the sliders, e.g. schedule=gpipe,stages=4,microbatches=8");
  app.add_option(
      "--series", a.classroom.series,
      "classroom mode: one screenshot per value, e.g. microbatches=1,2,4,8,16 or stages=2..8 (with "
      "--screenshot out/m.png: out/m-microbatches-01.png, ...)");
  app.add_option("--versus", a.classroom.versus,
                 "classroom mode: these schedules side by side under the same sliders, e.g. "
                 "gpipe,1f1b");
}

// Reads the parsed strings into `a.opt`; false (the error printed, one line) when they do not
// make a request: a bad --zoom, or an option that needs a trace, or two, without them.
bool read_viz_args(VizArgs& a, std::ostream& err) {
  viz::VizCliOptions& opt = a.opt;
  opt.model_states_only = a.memory == "model-states";
  opt.hide_memory = a.memory == "off";
  if (!a.zoom.empty()) {
    opt.zoom = parse_time_window(a.zoom);
    if (!opt.zoom) {
      fmt::print(err,
                 "mgpu viz: error: --zoom {}: give FROM..TO with units, FROM below TO, at most "
                 "{:g} s, e.g. --zoom 0.2ms..0.6ms (units s, ms, us)\n",
                 echo_input(a.zoom, 200), trace::kMaxTraceSpan);
      return false;
    }
    if (a.paths.empty()) {
      fmt::print(err,
                 "mgpu viz: error: --zoom needs a trace, e.g. mgpu viz cp.json --zoom "
                 "0.2ms..0.6ms (classroom mode does not take it)\n");
      return false;
    }
  }
  opt.layout = a.layout == "rows" ? viz::CompareLayout::rows : viz::CompareLayout::columns;
  if (opt.compare && a.paths.size() < 2) {
    fmt::print(err, "mgpu viz: error: --compare needs two traces, e.g. gpipe.json 1f1b.json\n");
    return false;
  }
  if (a.paths.empty() && !opt.highlight.empty()) {
    fmt::print(err,
               "mgpu viz: error: --highlight needs a trace, e.g. mgpu viz hybrid.json "
               "--highlight tp1 (classroom mode, without a trace, does not take it)\n");
    return false;
  }
  return true;
}

// Classroom mode without trace files, else the dashboard on them.
int show(VizArgs& a, std::ostream& err) {
  ex::select_impl("reference");  // classroom mode runs the pipeline lesson, which uses the seams
  if (a.paths.empty()) {
    a.classroom.presentation = a.opt.presentation;
    a.classroom.screenshot = a.opt.screenshot;
    a.classroom.width = a.opt.width;
    a.classroom.height = a.opt.height;
    a.classroom.hide_memory = a.opt.hide_memory;
    return run_classroom(a.classroom, err);
  }
  if (!a.classroom.settings.empty() || !a.classroom.series.empty() || !a.classroom.versus.empty()) {
    fmt::print(err,
               "mgpu viz: error: --set, --series and --versus drive classroom mode (no trace "
               "files), e.g. mgpu viz --versus gpipe,1f1b --set microbatches=8\n");
    return 2;
  }
  return viz::viz_main(a.paths, a.opt, err);
}

}  // namespace

int cmd_viz(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app(
      "open traces in the dashboard (no trace: classroom mode, re-running the pipeline "
      "lesson live)",
      "mgpu viz");
  VizArgs a;
  add_viz_options(app, a);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(err, "viz", fmt::format("{} (see `mgpu viz --help`)", e.what()));
  }
  if (!read_viz_args(a, err)) return 2;
  try {
    return show(a, err);
  } catch (const std::invalid_argument& e) {  // a file the user named (output_file.h)
    return usage_error(err, "viz", e.what());
  } catch (const std::exception& e) {
    fmt::print(err, "mgpu viz: error: {}\n", e.what());
    return 1;
  }
}

int show_trace(const trace::Trace& trace, const std::string& lesson_name, std::ostream& err) {
  (void)err;
  viz::DashboardOptions opt;
  opt.traces = {trace};
  opt.labels = {lesson_name};
  opt.title = "mgpu-lab - " + lesson_name;
  return viz::run_dashboard(opt);
}

#else

int cmd_viz(const std::vector<std::string>&, std::ostream&, std::ostream& err) {
  fmt::print(err,
             "mgpu viz: error: this build has no dashboard (install libimgui-dev "
             "libglfw3-dev libgl-dev and rebuild); the trace also opens in Perfetto\n");
  return 2;
}

int show_trace(const trace::Trace&, const std::string&, std::ostream& err) {
  fmt::print(err, "mgpu: this build has no dashboard; open the --trace file in Perfetto\n");
  return 2;
}

#endif

}  // namespace mgpu::lessons
