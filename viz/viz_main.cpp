// `mgpu viz`: load the traces (every bad file is one line), check the command line against them,
// and show the dashboard or write its screenshot.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/runtime/input_file.h"
#include "viz/dashboard.h"

#if __has_include("core/trace/trace_files.h")
#include "core/trace/analysis.h"
#include "core/trace/trace_files.h"
#define MGPU_VIZ_HAVE_READER 1
#endif

namespace mgpu::viz {

namespace {

// Empty when the window shows part of some trace's shown step; else why not, in one line.
std::string zoom_outside_traces(const TimeWindow& zoom, const std::vector<trace::Trace>& traces) {
  double longest = 0;  // the ruler runs from the shown step's start to the run's end
  for (const trace::Trace& t : traces) {
    const TraceView view(t);
    longest = std::max(longest, view.run_end() - view.shown_start());
  }
  if (zoom.from < longest) return {};
  return fmt::format(
      "--zoom starts at {} but the shown step ends at {} on the ruler; pick a "
      "window inside 0..{}",
      format_duration(zoom.from), format_duration(longest), format_duration(longest));
}

// --highlight: whether some trace's events name the group; if none does, one line on `err` that
// lists the groups they do name.
bool highlight_names_a_group(const std::string& highlight, const std::vector<trace::Trace>& traces,
                             std::ostream& err) {
  // Group names come from the events: index the traces once to list them.
  std::set<std::string> groups;
  for (const trace::Trace& t : traces)
    for (const trace::Event& e : t.events)
      if (!e.group.empty()) groups.insert(e.group);
  if (!groups.count(highlight)) {
    std::string names;
    for (const std::string& g : groups) names += (names.empty() ? "" : ", ") + g;
    err << "mgpu viz: --highlight " << highlight << ": no such communication group in "
        << (groups.empty() ? std::string("the trace (it has none)")
                           : "the trace; its groups: " + names)
        << "\n";
    return false;
  }
  return true;
}
}  // namespace

LoadedTrace load_trace_or_error(const std::string& path) {
  return load_run_or_error({path});
}

LoadedTrace load_run_or_error(const std::vector<std::string>& paths) {
  LoadedTrace out;
#ifdef MGPU_VIZ_HAVE_READER
  try {  // the project's own trace, or PyTorch profiler traces (files or a folder: one run)
    out.trace = trace::read_run_trace(paths).trace;
  } catch (const std::exception& e) {
    out.error = e.what();  // TraceFormatError names the file and what is wrong with it
  }
#else
  out.error = echo_input(paths.empty() ? "" : paths[0], 120) +
              ": this build has no trace reader (core/trace/trace_files.h)";
#endif
  std::replace(out.error.begin(), out.error.end(), '\n', ' ');  // always one line
  return out;
}

namespace {
#ifdef MGPU_VIZ_HAVE_READER
// The time of the step the dashboard shows (the last one; the whole run without steps).
double shown_step_time(const trace::Trace& t) {
  std::optional<int> last;
  for (const trace::Event& e : t.events)
    if (e.lane == trace::Lane::step && e.step >= 0) last = std::max(last.value_or(e.step), e.step);
  return trace::analysis_window(t, last).length();
}

// --compare: each run's shown step time and its ratio to the first run's (a real run beside the
// modeled run of its layout: how far the model is off).
void print_step_time_ratios(const DashboardOptions& options, std::ostream& out) {
  if (options.traces.size() < 2) return;
  const double first = shown_step_time(options.traces[0]);
  for (size_t i = 0; i < options.traces.size(); ++i) {
    const double t = shown_step_time(options.traces[i]);
    out << "step time " << options.labels[i] << ": " << format_duration(t);
    if (i > 0 && first > 0) out << fmt::format(" ({:.3g}x {})", t / first, options.labels[0]);
    out << "\n";
  }
}
#endif
}  // namespace

int viz_main(const std::vector<std::string>& trace_paths, const VizCliOptions& cli,
             std::ostream& err) {
  if (trace_paths.empty()) {
    err << "mgpu viz: give a trace file, e.g. mgpu run 1f1b --trace run.json\n";
    return 2;
  }
  if (cli.compare &&
      (trace_paths.size() < 2 || trace_paths.size() > static_cast<size_t>(kMaxCompared))) {
    err << "mgpu viz: --compare takes two to " << kMaxCompared << " traces (got "
        << trace_paths.size() << ")\n";
    return 2;
  }
  // Several PyTorch profiler files without --compare are the ranks of one run.
#ifdef MGPU_VIZ_HAVE_READER
  const bool one_run = !cli.compare && trace_paths.size() > 1 && trace::all_kineto(trace_paths);
#else
  const bool one_run = false;
#endif
  if (!cli.compare && trace_paths.size() > 1 && !one_run) {
    err << "mgpu viz: one trace (or one run's PyTorch profiler files), or --compare A.json "
           "B.json (up to "
        << kMaxCompared << ")\n";
    return 2;
  }
  DashboardOptions options;
  options.presentation = cli.presentation;
  options.layout = cli.layout;
  options.model_states_only = cli.model_states_only;
  options.show_memory = !cli.hide_memory;
  options.width = cli.width;
  options.title = cli.title.empty() ? "mgpu-lab" : cli.title;
  std::vector<std::vector<std::string>> runs;  // each: the paths of one run
  if (one_run)
    runs.push_back(trace_paths);
  else
    for (const std::string& path : trace_paths) runs.push_back({path});
  for (const std::vector<std::string>& run : runs) {
    const std::string& path = run.front();
    LoadedTrace loaded = load_run_or_error(run);
    if (!loaded.trace) {
      if (!cli.screenshot.empty()) {
        err << "mgpu viz: " << loaded.error << "\n";
        return 2;
      }
      options.error += (options.error.empty() ? "" : "\n") + loaded.error;
      continue;
    }
    options.traces.push_back(std::move(*loaded.trace));
    const std::filesystem::path name(path);
    options.labels.push_back(name.has_filename() ? name.filename().string()
                                                 : name.parent_path().filename().string() + "/");
  }
#ifdef MGPU_VIZ_HAVE_READER
  if (cli.compare) print_step_time_ratios(options, std::cout);
#endif
  if (!cli.highlight.empty()) {
    if (!highlight_names_a_group(cli.highlight, options.traces, err)) return 2;
    options.highlight = cli.highlight;
  }
  if (cli.zoom) {
    if (const std::string why = zoom_outside_traces(*cli.zoom, options.traces); !why.empty()) {
      err << "mgpu viz: " << why << "\n";
      return 2;
    }
    options.zoom = cli.zoom;
  }
  if (!cli.screenshot.empty()) {
    return render_screenshot(options, cli.screenshot, cli.width, cli.height);
  }
  return run_dashboard(options);
}

int viz_main(const std::vector<std::string>& trace_paths, const VizCliOptions& cli) {
  return viz_main(trace_paths, cli, std::cerr);
}

}  // namespace mgpu::viz
