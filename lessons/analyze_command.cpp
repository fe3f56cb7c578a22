// `mgpu analyze TRACE...`: explains a trace, the project's own or a PyTorch profiler run's, per
// rank and step (core/trace/breakdown.h computes every figure; this file only prints them).
#include <algorithm>
#include <optional>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/runtime/input_file.h"
#include "core/trace/breakdown.h"
#include "core/trace/trace_files.h"
#include "lessons/cli.h"

namespace mgpu::lessons {

// Named rather than anonymous: lessons/ builds as unity batches, where another file's anonymous
// helpers (a `duration`, a `to_json`) would share this file's scope.
namespace analyze_report {

struct AnalyzeArgs {
  std::vector<std::string> paths;
  bool json = false;
  std::optional<int> step;
  int top = 5;
  std::string align = "first-step";
};

std::string duration(double s) {
  if (s == 0) return "0";
  if (std::abs(s) < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (std::abs(s) < 1) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.3f} s", s);
}

std::string share(double part, double whole) {
  return fmt::format("{} {:>3.0f}%", duration(part), whole > 0 ? 100 * part / whole : 0.0);
}

// The rank as the user knows it: distributedInfo's rank for a PyTorch run when the trace has it.
int shown_rank(const trace::Trace& t, int rank) {
  const auto& ranks = t.metadata.value("distributed_ranks", nlohmann::json::array());
  if (rank < static_cast<int>(ranks.size()) && ranks[rank].is_number_integer() &&
      ranks[rank].get<int>() >= 0)
    return ranks[rank].get<int>();
  return rank;
}

// Steps as the user knows them: ProfilerStep#N for a PyTorch run; a lesson counts from 1 (its
// trace from 0), as the lesson's own tables do.
int step_shown_offset(const trace::RunTrace& run) {
  return run.kineto ? 0 : 1;
}

// A pipeline: the events name micro-batches (a lesson), or a PyTorch run's annotations do.
bool has_microbatches(const trace::Trace& t) {
  if (t.metadata.value("microbatch_annotations", int64_t{0}) > 0) return true;
  return std::any_of(t.events.begin(), t.events.end(),
                     [](const trace::Event& e) { return e.microbatch >= 0; });
}

std::vector<trace::StepBreakdown> breakdowns(const trace::RunTrace& run, std::optional<int> step) {
  if (step) return {trace::breakdown(run.trace, step, run.launch_end)};
  return trace::breakdown_steps(run.trace, run.launch_end);
}

void print_step(const trace::RunTrace& run, const trace::StepBreakdown& b, bool bubbles,
                std::ostream& out) {
  const double span = b.window.length();
  fmt::print(out, "\n{} ({})\n",
             b.step ? fmt::format("step {}", *b.step + step_shown_offset(run)) : "whole trace",
             duration(span));
  fmt::print(out, "{:>5}  {:>16}  {:>16}  {:>16}  {:>16}  {:>10} {:>10} {:>10}  {:>9}{}\n", "rank",
             "compute", "memory", "comm exposed", "idle", "idle:host", "kernel", "other", "overlap",
             bubbles ? "  bubble" : "");
  for (const trace::RankBreakdown& r : b.ranks) {
    fmt::print(out, "{:>5}  {:>16}  {:>16}  {:>16}  {:>16}  {:>10} {:>10} {:>10}  {:>8.0f}%{}\n",
               shown_rank(run.trace, r.rank), share(r.compute, span), share(r.exposed_memory, span),
               share(r.exposed_comm, span), share(r.device_idle, span),
               duration(r.idle_by_cause.host), duration(r.idle_by_cause.kernel),
               duration(r.idle_by_cause.other), 100 * r.summary.overlap_fraction,
               bubbles ? fmt::format("  {:>5.1f}%", 100 * r.summary.bubble_fraction) : "");
  }
  if (b.straggler >= 0)
    fmt::print(out,
               "straggler: rank {}, {} more work (compute + memory) than the least loaded "
               "rank ({:.1f}% of the step)\n",
               shown_rank(run.trace, b.straggler), duration(b.straggler_lead),
               span > 0 ? 100 * b.straggler_lead / span : 0.0);
}

void print_top(const trace::RunTrace& run, int top, std::ostream& out) {
  const trace::Interval whole = trace::analysis_window(run.trace);
  fmt::print(out, "\ntop operations by time, whole trace ({} per category)\n", top);
  const auto tops = trace::top_kernels_by_rank(run.trace, whole, top);
  for (int rank = 0; rank < run.trace.num_ranks; ++rank) {
    fmt::print(out, "rank {}\n", shown_rank(run.trace, rank));
    for (const trace::KernelTime& k : tops[rank])
      fmt::print(out, "  {:<8} {:>11} {:>6}x  {}\n", k.category, duration(k.seconds), k.count,
                 echo_input(k.name, 90));
  }
}

void print_text(const trace::RunTrace& run, const std::vector<trace::StepBreakdown>& steps, int top,
                std::ostream& out) {
  const auto& md = run.trace.metadata;
  fmt::print(out, "{} rank{}, {}{}\n", run.trace.num_ranks, run.trace.num_ranks == 1 ? "" : "s",
             run.kineto ? "PyTorch profiler trace" : "mgpu trace",
             run.kineto ? fmt::format(" (clocks aligned: {})", md.value("align", "?")) : "");
  // Faults the run injected (core/runtime/faults.h), as the trace names them.
  if (md.is_object() && md.contains("faults") && md["faults"].is_object())
    for (const auto& f : md["faults"].value("injected", nlohmann::json::array()))
      if (f.is_string()) fmt::print(out, "injected: {}\n", echo_input(f.get<std::string>(), 90));
  fmt::print(out,
             "compute + memory + comm exposed + idle = the step's time; idle split by "
             "cause: host, kernel, other (docs/real-traces.md)\n");
  const bool bubbles = has_microbatches(run.trace);  // once: it reads every event
  for (const trace::StepBreakdown& b : steps) print_step(run, b, bubbles, out);
  print_top(run, top, out);
  for (size_t r = 0; r < run.host.size(); ++r)
    if (run.host[r].calls > 0)
      fmt::print(out, "rank {}: {} CUDA runtime calls on the host, {}\n",
                 shown_rank(run.trace, static_cast<int>(r)), run.host[r].calls,
                 duration(run.host[r].seconds));
}

nlohmann::json rank_json(const trace::Trace& t, const trace::RankBreakdown& r) {
  const trace::RankSummary& s = r.summary;
  return {{"rank", shown_rank(t, r.rank)},
          {"compute", r.compute},
          {"exposed_memory", r.exposed_memory},
          {"exposed_comm", r.exposed_comm},
          {"idle", r.device_idle},
          {"idle_by_cause",
           {{"host", r.idle_by_cause.host},
            {"kernel", r.idle_by_cause.kernel},
            {"other", r.idle_by_cause.other}}},
          {"busy", s.busy},
          {"comm", s.comm},
          {"overlap", s.overlap},
          {"overlap_fraction", s.overlap_fraction},
          {"bubble_fraction", s.bubble_fraction},
          {"bytes_sent", s.bytes_sent},
          {"peak_memory", s.peak_memory.total}};
}

nlohmann::json to_json(const trace::RunTrace& run, const std::vector<trace::StepBreakdown>& steps,
                       int top) {
  nlohmann::json doc = {{"ranks", run.trace.num_ranks},
                        {"source", run.kineto ? "kineto" : "mgpu"},
                        {"steps", nlohmann::json::array()},
                        {"top", nlohmann::json::array()}};
  if (run.kineto) doc["align"] = run.trace.metadata.value("align", "");
  for (const trace::StepBreakdown& b : steps) {
    const auto shown = b.step ? nlohmann::json(*b.step + step_shown_offset(run)) : nlohmann::json();
    nlohmann::json step = {{"step", shown},
                           {"window", {b.window.begin, b.window.end}},
                           {"step_time", b.window.length()},
                           {"ranks", nlohmann::json::array()}};
    for (const auto& r : b.ranks) step["ranks"].push_back(rank_json(run.trace, r));
    if (b.straggler >= 0)
      step["straggler"] = {{"rank", shown_rank(run.trace, b.straggler)},
                           {"lead", b.straggler_lead}};
    doc["steps"].push_back(std::move(step));
  }
  const trace::Interval whole = trace::analysis_window(run.trace);
  const auto tops = trace::top_kernels_by_rank(run.trace, whole, top);
  for (int rank = 0; rank < run.trace.num_ranks; ++rank) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& k : tops[rank])
      ops.push_back(
          {{"category", k.category}, {"name", k.name}, {"seconds", k.seconds}, {"count", k.count}});
    doc["top"].push_back({{"rank", shown_rank(run.trace, rank)}, {"operations", ops}});
  }
  return doc;
}

}  // namespace analyze_report

int cmd_analyze(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app(
      "explain traces per rank and step: compute, memory, exposed communication and idle time "
      "(by cause), overlap, stragglers, top operations",
      "mgpu analyze");
  using namespace analyze_report;
  AnalyzeArgs a;
  app.add_option("traces", a.paths,
                 "a trace written with --trace, or a PyTorch profiler run: its files (one per "
                 "rank, .json or .json.gz) or their folder")
      ->required();
  app.add_flag("--json", a.json, "print JSON instead of text");
  app.add_option("--step", a.step,
                 "only this step (N of ProfilerStep#N; a lesson's steps count from 1, as it "
                 "prints them)");
  app.add_option("--top", a.top, "operations listed per category (default 5)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--align", a.align,
                 "PyTorch traces: align ranks' clocks at their first ProfilerStep (first-step, "
                 "default) or keep them as recorded (clock)")
      ->check(CLI::IsMember({"first-step", "clock"}));
  bool done = false;
  if (const int rc = parse_command(app, args, out, err, "analyze", done); done) return rc;
  trace::KinetoOptions options;
  options.align = a.align == "clock" ? trace::KinetoOptions::Align::clock
                                     : trace::KinetoOptions::Align::first_step;
  try {
    const trace::RunTrace run = trace::read_run_trace(a.paths, options);
    if (a.step) *a.step -= step_shown_offset(run);
    const auto steps = breakdowns(run, a.step);
    if (a.json)
      out << to_json(run, steps, a.top).dump(2) << "\n";
    else
      print_text(run, steps, a.top, out);
    return 0;
  } catch (const std::exception& e) {  // a bad file (one line), or a --step the trace lacks
    std::string line = e.what();
    std::replace(line.begin(), line.end(), '\n', ' ');
    return usage_error(err, "analyze", line);
  }
}

}  // namespace mgpu::lessons
