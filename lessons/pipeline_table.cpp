// DualPipe's README table (github.com/deepseek-ai/DualPipe, "Pipeline bubbles and memory usage
// comparison") at the run's P, in theory mode's costs, beside what the run measured: the bubble
// per stage from the trace, the parameter copies from the stages' parameters (and the
// allocator's bytes), the activation peaks from the executor's stash count.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <ostream>

#include "core/runtime/allocator.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/theory/schedule_kind.h"
#include "lessons/pipeline.h"
#include "lessons/training.h"

namespace mgpu::lessons {

using theory::ChunkCosts;

namespace {

// One row: DualPipe's chunks are whole stages of one of its two copies, a V's are half-stages.
// `at_this_p` is the formula with this table's PP and costs put in, so it gives the theory column.
void table_row(std::ostream& out, const char* name, const char* formula,
               const std::string& at_this_p, double bubble, const char* copies, int peak,
               const char* chunk_note) {
  fmt::print(out, "  {:<10} {:<20} {:<22} {:>6} {:>7}  {}{}\n", name, formula, at_this_p,
             fmt::format("{:g}", bubble), copies, peak, chunk_note);
}

}  // namespace

void print_dualpipe_table(std::ostream& out, const std::string& schedule, const PipelineResult& r) {
  const int P = static_cast<int>(r.last_step.size());
  const ChunkCosts stage{1, 2, 1}, chunk{0.5, 1, 0.5};  // ms
  fmt::print(out,
             "\nDualPipe's table (github.com/deepseek-ai/DualPipe) at {} devices, in ms (a "
             "stage's F 1, B 2, W 1; a V chunk is half a stage; F&B = F + B on one stream):\n",
             P);
  fmt::print(out, "  {:<10} {:<20} {:<22} {:>6} {:>7}  {}\n", "schedule", "bubble per stage",
             "= at PP here", "theory", "params", "peak activations (chunks held)");
  const ChunkCosts& s = stage;
  table_row(out, "1F1B", "(PP-1)(F+B)", fmt::format("({}-1)({:g}+{:g})", P, s.F, s.B),
            theory::bubble_1f1b(P, stage), "1x", theory::peak_chunks_1f1b(P), "");
  table_row(out, "ZB1P", "(PP-1)(F+B-2W)",
            fmt::format("({}-1)({:g}+{:g}-2x{:g})", P, s.F, s.B, s.W),
            theory::bubble_zb1p(P, stage), "1x", theory::peak_chunks_1f1b(P), "");
  table_row(out, "ZB-V", "(P-1)F", fmt::format("({}-1) x {:g}", P, chunk.F),
            theory::bubble_zbv(P, chunk), "1x", theory::peak_chunks_1f1b(2 * P),
            " (half-stage chunks)");
  // DualPipeV's PP counts the chunks in its pipe: two half-stages per device, 2P of them.
  auto dualpipe_at = [](int pp, const ChunkCosts& c) {
    return fmt::format("({}/2-1)({:g}+{:g}-3x{:g})", pp, c.FandB(), c.B, c.W);
  };
  table_row(out, "DualPipeV", "(PP/2-1)(F&B+B-3W)", dualpipe_at(2 * P, chunk),
            theory::bubble_dualpipe(2 * P, chunk), "1x", theory::peak_chunks_dualpipe(2 * P),
            " (half-stage chunks; PP = 2 x devices)");
  if (P % 2 == 0)  // DualPipe's two copies meet in the middle: even P only
    table_row(out, "DualPipe", "(PP/2-1)(F&B+B-3W)", dualpipe_at(P, stage),
              theory::bubble_dualpipe(P, stage), "2x", theory::peak_chunks_dualpipe(P),
              " (whole-stage chunks)");
  int64_t held = 0;
  for (int64_t n : r.param_elements) held += n;
  int most_held = 0;
  for (const auto& st : r.last_step) most_held = std::max(most_held, st.peak_stashed);
  const double worst = *std::max_element(r.measured_bubble.begin(), r.measured_bubble.end());
  fmt::print(out,
             "  this run ({}): bubble {:g} ms per stage (trace: {:.1f}% of a {:g} ms step), "
             "params {:.2f}x (all stages / model), peak {} chunks held\n",
             schedule, worst * r.measured_step_seconds * 1e3, 100 * worst,
             r.measured_step_seconds * 1e3, double(held) / double(r.model_params), most_held);
  if (!theory::traits(theory::schedule_kind(schedule)).bidirectional) return;
  for (int s = 0; s < P; ++s)
    fmt::print(out, "  rank {}  parameters {:>10} (allocator; stages {} and {})\n", s,
               format_bytes(r.param_bytes[s]), s, P - 1 - s);
}

}  // namespace mgpu::lessons
