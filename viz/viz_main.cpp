// `mgpu viz`: load the traces (every bad file is one line), check the command line against them,
// and show the dashboard or write its screenshot.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/runtime/input_file.h"
#include "viz/dashboard.h"

#if __has_include("core/trace/chrome_trace.h")
#include "core/trace/chrome_trace.h"
#define MGPU_VIZ_HAVE_READER 1
#endif

namespace mgpu::viz {

namespace {
constexpr size_t kMaxCompared = 6;  // views that still fit a screen (six schedules in rows)

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
}  // namespace

LoadedTrace load_trace_or_error(const std::string& path) {
  LoadedTrace out;
#ifdef MGPU_VIZ_HAVE_READER
  try {
    out.trace = trace::read_chrome_trace(path);
  } catch (const std::exception& e) {
    out.error = e.what();  // TraceFormatError names the file and what is wrong with it
  }
#else
  out.error =
      echo_input(path, 120) + ": this build has no trace reader (core/trace/chrome_trace.h)";
#endif
  std::replace(out.error.begin(), out.error.end(), '\n', ' ');  // always one line
  return out;
}

int viz_main(const std::vector<std::string>& trace_paths, const VizCliOptions& cli,
             std::ostream& err) {
  if (trace_paths.empty()) {
    err << "mgpu viz: give a trace file, e.g. mgpu run 1f1b --trace run.json\n";
    return 2;
  }
  if (cli.compare && (trace_paths.size() < 2 || trace_paths.size() > kMaxCompared)) {
    err << "mgpu viz: --compare takes two to " << kMaxCompared << " traces (got "
        << trace_paths.size() << ")\n";
    return 2;
  }
  if (!cli.compare && trace_paths.size() > 1) {
    err << "mgpu viz: one trace, or --compare A.json B.json (up to " << kMaxCompared << ")\n";
    return 2;
  }
  DashboardOptions options;
  options.presentation = cli.presentation;
  options.layout = cli.layout;
  options.model_states_only = cli.model_states_only;
  options.width = cli.width;
  options.title = cli.title.empty() ? "mgpu-lab" : cli.title;
  for (const std::string& path : trace_paths) {
    LoadedTrace loaded = load_trace_or_error(path);
    if (!loaded.trace) {
      if (!cli.screenshot.empty()) {
        err << "mgpu viz: " << loaded.error << "\n";
        return 2;
      }
      options.error += (options.error.empty() ? "" : "\n") + loaded.error;
      continue;
    }
    options.traces.push_back(std::move(*loaded.trace));
    options.labels.push_back(std::filesystem::path(path).filename().string());
  }
  if (!cli.highlight.empty()) {
    // Group names come from the events: index the traces once to list them.
    std::set<std::string> groups;
    for (const trace::Trace& t : options.traces)
      for (const trace::Event& e : t.events)
        if (!e.group.empty()) groups.insert(e.group);
    if (!groups.count(cli.highlight)) {
      std::string names;
      for (const std::string& g : groups) names += (names.empty() ? "" : ", ") + g;
      err << "mgpu viz: --highlight " << cli.highlight << ": no such communication group in "
          << (groups.empty() ? std::string("the trace (it has none)")
                             : "the trace; its groups: " + names)
          << "\n";
      return 2;
    }
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
