// What a training run prints: progress and loss, checkpoint and loss-scaling lines, the model and
// world it ran on, and the end-of-run timeline, per-rank table, memory and trace.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/ops/cuda_emulation.h"
#include "core/theory/model_states.h"
#include "core/trace/analysis.h"
#include "core/trace/ascii_timeline.h"
#include "core/trace/chrome_trace.h"
#include "lessons/training.h"
#include "lessons/viz_command.h"

namespace mgpu::lessons {

void print_checkpoint_lines(std::ostream& out, const CommonOptions& c,
                            const train::TrainResult& r) {
  if (r.first_step > 0) fmt::print(out, "resumed from {} at step {}\n", c.resume, r.first_step);
  if (r.fresh_optimizer)
    fmt::print(out,
               "checkpoint {} holds parameters only (no optimizer state): {} starts fresh from "
               "zero state\n",
               c.resume, c.optimizer);
  if (r.checkpoint_written)
    fmt::print(out,
               "checkpoint: {} (the full model + {} state, gathered from every rank, step {})\n",
               c.checkpoint, c.optimizer, c.steps);
  print_loss_scaling(out, r);
}

void print_loss_scaling(std::ostream& out, const train::TrainResult& r) {
  if (r.loss_scale == 0) return;  // no loss scaling in this run
  std::string which;
  for (size_t i = 0; i < r.skipped_steps.size() && i < 8; ++i)
    which += fmt::format("{}{}", i ? ", " : "", r.skipped_steps[i] + 1);
  if (r.skipped_steps.size() > 8) which += ", ...";
  fmt::print(out,
             "loss scaling (fp16): {} step{} skipped on inf/NaN gradients{}, every rank together; "
             "scale now {:g}\n",
             r.skipped_steps.size(), r.skipped_steps.size() == 1 ? "" : "s",
             which.empty() ? "" : " (step " + which + ")", r.loss_scale);
}

LossLog::LossLog(const CommonOptions& c, std::ostream& out)
    : out_(out), steps_(c.steps), quiet_(c.quiet), phantom_(c.device == "phantom") {
  every_ = c.log_every > 0 ? c.log_every : std::max(1, c.steps / 10);
}

void LossLog::record(int step, float loss) {
  losses_.push_back(loss);
  bool last = step + 1 == steps_;
  if (quiet_ || !(step % every_ == 0 || last)) return;
  if (phantom_) {  // shapes and times only: there is no loss to print
    fmt::print(out_, "  step {}/{}  (phantom device: timing only, no loss)\n", step + 1, steps_);
    return;
  }
  int width = static_cast<int>(std::to_string(steps_).size());
  fmt::print(out_, "  step {:>{}}/{}  loss {:.4f}\n", step + 1, width, steps_, loss);
  out_.flush();
}

void print_loss_summary(std::ostream& out, const CommonOptions& c, const std::vector<float>& losses,
                        const std::string& note) {
  if (losses.empty()) return;
  if (c.device == "phantom") {
    fmt::print(out, "\nloss: none over {} steps (phantom device: timing only, no values)\n",
               losses.size());
    return;
  }
  fmt::print(out, "\nloss: {:.4f} -> {:.4f} over {} steps{}\n", losses.front(), losses.back(),
             losses.size(), note);
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return (n < 0 ? "-" : "") + s;
}

std::string format_seconds(double s) {
  double a = std::abs(s);
  if (a >= 1) return fmt::format("{:.3f} s", s);
  if (a >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  if (a >= 1e-6) return fmt::format("{:.3f} us", s * 1e6);
  return fmt::format("{:.1f} ns", s * 1e9);
}

std::string format_comm_split(const trace::RankSummary& r) {
  return fmt::format("{} ({} on the wire + {} waiting for a partner)", format_seconds(r.comm),
                     format_seconds(r.comm_wire), format_seconds(r.comm_wait));
}

std::string describe_model(const GPTConfig& cfg, int64_t params) {
  std::string experts;
  if (cfg.experts > 0)
    experts = fmt::format(", {} experts top-{}{} ({} active per token)", cfg.experts, cfg.top_k,
                          cfg.moe_every > 1 ? fmt::format(" every {} blocks", cfg.moe_every) : "",
                          with_commas(theory::gpt_active_parameters(cfg)));
  return fmt::format("{} layers, dim {}, {} heads, seq {}, vocab {} -> {} parameters{}{}{}",
                     cfg.layers, cfg.dim, cfg.heads, cfg.seq_len, cfg.vocab, with_commas(params),
                     cfg.tie_embeddings ? ", tied embeddings" : "", describe_style(cfg), experts);
}

std::string describe_style(const GPTConfig& cfg) {
  if (cfg.style.is_gpt2()) return "";  // GPT-2's block, as every description before the styles
  const BlockStyle& s = cfg.style;
  std::string kv = cfg.kv_head_count() == cfg.heads ? "multi-head"
                   : cfg.kv_head_count() == 1
                       ? "1 kv head (MQA)"
                       : fmt::format("{} kv heads (GQA)", cfg.kv_head_count());
  return fmt::format("; {}, {} MLP of width {}, {} positions{}, {}{}", norm_name(s.norm),
                     mlp_name(s.mlp), cfg.ffn_hidden(), positions_name(s.positions),
                     cfg.rope() ? fmt::format(" (theta {:.0f})", s.rope_theta) : "", kv,
                     s.bias ? "" : ", no biases");
}

std::string describe_world(const WorldOptions& w) {
  std::string dev = w.device == DeviceKind::cpu       ? "CPU virtual GPU"
                    : w.device == DeviceKind::phantom ? "phantom GPU (shapes only)"
                    : cuda::emulation_requested()     ? "CUDA GPU (emulated on the CPU)"
                                                      : "CUDA GPU";
  std::string s = fmt::format("{} x{}, clock {}", dev, w.ranks, clock_name(w.clock));
  if (w.clock == ClockKind::modeled)
    s += fmt::format(" on {} ({:.0f} TFLOP/s, {:.0f} GB/s, {} link)", w.profile.name,
                     w.profile.peak_flops / 1e12, w.profile.mem_bandwidth / 1e9,
                     w.profile.intra_node.name);
  return s;
}

void print_memory(std::ostream& out, const std::vector<train::RankReport>& ranks) {
  fmt::print(out, "peak memory per rank:\n  {:<6}", "rank");
  for (int c = 0; c < kNumMemCategories; ++c)
    fmt::print(out, " {:>15}", category_name(static_cast<MemCategory>(c)));
  fmt::print(out, " {:>12}\n", "all at once");
  for (const train::RankReport& rank : ranks) {
    const MemoryStats& s = rank.memory;
    fmt::print(out, "  {:<6}", rank.rank);
    for (int c = 0; c < kNumMemCategories; ++c) fmt::print(out, " {:>15}", format_bytes(s.peak[c]));
    fmt::print(out, " {:>12}\n", format_bytes(s.peak_total));
  }
}

std::optional<int> last_step(const trace::Trace& trace) {
  std::optional<int> last;
  for (auto& e : trace.events)
    if (e.lane == trace::Lane::step && e.step >= 0) last = std::max(last.value_or(e.step), e.step);
  return last;
}

void print_timeline(std::ostream& out, const trace::Trace& trace, std::optional<int> step) {
  if (!step) step = last_step(trace);
  trace::AsciiTimelineOptions opt;
  opt.step = step;
  fmt::print(out, "\ntimeline{}:\n{}", step ? fmt::format(" of step {}", *step + 1) : "",
             trace::render_ascii_timeline(trace, opt));
}

void print_rank_table(std::ostream& out, const trace::Trace& trace, std::optional<int> step,
                      bool pipeline_schedule) {
  if (!step) step = last_step(trace);
  trace::TraceSummary s = trace::analyze(trace, step);
  fmt::print(out, "\nper rank{} ({} window):\n", step ? fmt::format(", step {}", *step + 1) : "",
             format_seconds(s.window.end - s.window.begin));
  // comm = wire (bytes moving) + wait (for a partner that has not sent yet): see the glossary.
  fmt::print(out, "  {:<5} {:>11} {:>11} {:>11} {:>11} {:>8} {:>9} {:>11} {:>12}\n", "rank", "busy",
             "comm wire", "comm wait", "idle", pipeline_schedule ? "bubble" : "idle %", "overlap",
             "sent", "peak memory");
  for (const trace::RankSummary& r : s.ranks)
    fmt::print(out, "  {:<5} {:>11} {:>11} {:>11} {:>11} {:>7.1f}% {:>8.1f}% {:>11} {:>12}\n",
               r.rank, format_seconds(r.busy), format_seconds(r.comm_wire),
               format_seconds(r.comm_wait), format_seconds(r.idle), 100 * r.bubble_fraction,
               100 * r.overlap_fraction, format_bytes(r.wire_bytes),
               format_bytes(r.peak_memory.total));
}

int finish_run(const CommonOptions& c, const trace::Trace& trace, const std::string& lesson,
               std::ostream& out) {
  print_timeline(out, trace);
  // "bubble" is the idle time a pipeline schedule makes; elsewhere idle time is just idle.
  print_rank_table(out, trace, {},
                   lesson == "pipeline" || lesson == "hybrid" || lesson == "model_parallel");
  return finish_trace(c, trace, lesson, out);
}

int finish_trace(const CommonOptions& c, const trace::Trace& trace, const std::string& lesson,
                 std::ostream& out) {
  // Under mpirun only rank 0's process holds the merged trace (the others' is empty): it alone
  // writes the file and opens the dashboard, whatever lesson calls this.
  if (!root_process()) return 0;
  if (!c.trace_path.empty()) {
    // `--trace out/run.json` should just work: create the folder if it is missing.
    const auto folder = std::filesystem::path(c.trace_path).parent_path();
    std::error_code ignored;
    if (!folder.empty()) std::filesystem::create_directories(folder, ignored);
    trace::write_chrome_trace(trace, c.trace_path);
    fmt::print(out, "trace: {} ({} events; open with `mgpu viz {}` or in Perfetto)\n", c.trace_path,
               trace.events.size(), c.trace_path);
  }
  if (c.viz) return show_trace(trace, lesson, std::cerr);
  return 0;
}

}  // namespace mgpu::lessons
