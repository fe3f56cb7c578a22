// The expert load: where a mixture-of-experts router sent the shown step's tokens, read from the
// trace's "dispatch counts" events (the numbers the expert_parallel lesson prints). One small heat
// map per MoE block: rows are GPUs and their sum, columns experts; a cell's shade is its count
// over the block's largest, so a hot expert (and the GPU holding it) stands out.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/theory/expert_parallel.h"
#include "viz/panels.h"

namespace mgpu::viz {

namespace {

// `colour` at `strength` (0..1) over the lane background.
ImU32 shade(ImU32 colour, ImU32 background, double strength) {
  auto channel = [&](int shift) {
    const double a = (colour >> shift) & 0xFF, b = (background >> shift) & 0xFF;
    return static_cast<ImU32>(std::lround(b + (a - b) * std::clamp(strength, 0.0, 1.0))) << shift;
  };
  return channel(IM_COL32_R_SHIFT) | channel(IM_COL32_G_SHIFT) | channel(IM_COL32_B_SHIFT) |
         (0xFFu << IM_COL32_A_SHIFT);
}

void draw_block(const PanelContext& ctx, const trace::ExpertLoad& load) {
  const Palette& pal = ctx.pal;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const std::vector<int64_t> total = load.total();
  char title[160];
  std::snprintf(title, sizeof title,
                "block %d: tokens per expert (kept), max/mean %.2f  (the summed row is shaded "
                "on its own scale)",
                load.layer, theory::load_imbalance(total));
  ImGui::TextDisabled("%s", title);
  const float line = ImGui::GetTextLineHeight();
  const float label_w = ImGui::CalcTextSize("GPU 00 ").x + 4 * ctx.scale;
  const float cell_w = std::max(ImGui::CalcTextSize("00000").x, 3 * line), cell_h = line + 2;
  int64_t busiest = 1, busiest_total = 1;
  for (const auto& counts : load.per_rank)
    for (int64_t n : counts) busiest = std::max(busiest, n);
  for (int64_t n : total) busiest_total = std::max(busiest_total, n);
  auto row = [&](const char* label, const std::vector<int64_t>& counts, int64_t scale) {
    const ImVec2 at = ImGui::GetCursorScreenPos();
    dl->AddText({at.x, at.y + 1}, pal.ruler_text, label);
    for (size_t e = 0; e < counts.size(); ++e) {
      const ImVec2 a{at.x + label_w + e * cell_w, at.y}, b{a.x + cell_w - 1, a.y + cell_h - 1};
      dl->AddRectFilled(a, b, shade(pal.comm, pal.lane_background, double(counts[e]) / scale));
      const std::string text = std::to_string(counts[e]);
      const float w = ImGui::CalcTextSize(text.c_str()).x;
      dl->AddText({a.x + (cell_w - w) / 2, a.y + 1}, pal.cell_text, text.c_str());
    }
    ImGui::Dummy({label_w + counts.size() * cell_w, cell_h});
  };
  {  // the expert numbers over the columns
    const ImVec2 at = ImGui::GetCursorScreenPos();
    for (size_t e = 0; e < total.size(); ++e) {
      const std::string text = "e" + std::to_string(e);
      const float w = ImGui::CalcTextSize(text.c_str()).x;
      dl->AddText({at.x + label_w + e * cell_w + (cell_w - w) / 2, at.y}, pal.ruler_text,
                  text.c_str());
    }
    ImGui::Dummy({label_w + total.size() * cell_w, line});
  }
  for (size_t r = 0; r < load.per_rank.size(); ++r) {
    if (load.per_rank[r].empty()) continue;
    char label[16];
    std::snprintf(label, sizeof label, "GPU %zu", r);
    row(label, load.per_rank[r], busiest);
  }
  row("all", total, busiest_total);
}

}  // namespace

void draw_expert_load(const PanelContext& ctx, const TraceView& view) {
  if (view.expert_loads().empty()) return;
  ImGui::Spacing();
  for (const trace::ExpertLoad& load : view.expert_loads()) draw_block(ctx, load);
}

}  // namespace mgpu::viz
