// The summary: one row per rank with busy, communication and idle time, bubble and overlap
// percentages and peak memory, and under it what the lesson's theory predicted (trace metadata
// "predictions"), e.g. "bubble 27.3% (theory 27.3%)".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "viz/panels.h"

namespace mgpu::viz {

namespace {
// Keys of metadata["predictions"] that are fractions, shown beside the measured value.
struct Measured {
  const char* key;
  const char* label;
  double (*measure)(const TraceView&);
};
double mean_bubble(const TraceView& v) {
  double sum = 0;
  for (int r = 0; r < v.num_ranks(); ++r) sum += v.summary(r).bubble;
  return v.num_ranks() ? sum / v.num_ranks() : 0;
}
double mean_overlap(const TraceView& v) {
  double sum = 0;
  for (int r = 0; r < v.num_ranks(); ++r) sum += v.summary(r).overlap;
  return v.num_ranks() ? sum / v.num_ranks() : 0;
}
constexpr Measured kMeasured[] = {
    {"bubble_fraction", "bubble", mean_bubble},
    {"overlap_fraction", "overlap", mean_overlap},
};
}  // namespace

namespace {

// Theory vs measured (metadata "predictions"), as bars on one 0..100% scale, with the longest
// caption that fits beside them.
void draw_theory_bars(const PanelContext& ctx, const TraceView& view, float label_w, float bar_w,
                      float bar_h, float gap) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeight(), text_gap = 8 * ctx.scale;
  const float room = panel_width(ctx) - label_w - bar_w - text_gap;
  for (const Measured& m : kMeasured) {
    const auto theory = view.prediction(m.key);
    if (!theory) continue;
    for (int k = 0; k < 2; ++k) {
      const double value = k == 0 ? m.measure(view) : *theory;
      const std::string name = m.label, pct = format_percent(value);
      const std::vector<std::string> wordings =
          k == 0 ? std::vector<std::string>{name + " measured (mean over ranks) " + pct,
                                            name + " measured " + pct, "measured " + pct}
                 : std::vector<std::string>{name + " theory " + pct, "theory " + pct};
      std::string text = longest_fitting(wordings, room, imgui_measure());
      if (text.empty()) text = wordings.back();
      const ImVec2 at = ImGui::GetCursorScreenPos();
      const float x0 = at.x + label_w;
      dl->AddRectFilled({x0, at.y}, {x0 + bar_w, at.y + bar_h}, ctx.pal.lane_background);
      const float len = static_cast<float>(std::clamp(value, 0.0, 1.0)) * bar_w;
      if (len > 0)
        dl->AddRectFilled({x0, at.y}, {x0 + len, at.y + bar_h},
                          k == 0 ? ctx.pal.idle_hatch : ctx.pal.ruler_line);
      const ImVec2 t{x0 + bar_w + text_gap, at.y + (bar_h - line) / 2};
      const ImVec2 size = draw_text(ctx, dl, t, ctx.pal.ruler_text, text);
      ImGui::Dummy({label_w + bar_w + text_gap + size.x, bar_h + gap});
    }
  }
}

// A line that wraps at the panel's right edge instead of running into the next column.
void wrapped_line(const PanelContext& ctx, const std::string& text, float width, bool disabled) {
  ImGui::PushTextWrapPos(ImGui::GetCursorPosX() + width);
  if (disabled)
    ImGui::TextDisabled("%s", text.c_str());
  else
    ImGui::TextUnformatted(text.c_str());
  ImGui::PopTextWrapPos();
  note_item(ctx, text);
}

std::string cell_text(const RankSummary& s, int rank, SummaryColumn c) {
  switch (c) {
    case SummaryColumn::rank:
      return "GPU " + std::to_string(rank);
    case SummaryColumn::busy:
      return format_duration(s.busy);
    case SummaryColumn::comm_wire:
      return format_duration(s.comm_wire);
    case SummaryColumn::comm_wait:
      return format_duration(s.comm_wait);
    case SummaryColumn::idle:
      return format_duration(s.idle);
    case SummaryColumn::bubble:
      return format_percent(s.bubble);
    case SummaryColumn::overlap:
      return s.comm > 0 ? format_percent(s.overlap) : "-";
    case SummaryColumn::sent:
      return s.bytes_sent > 0 ? format_bytes(static_cast<double>(s.bytes_sent)) : "-";
    case SummaryColumn::peak:
      return s.peak_bytes > 0 ? format_bytes(static_cast<double>(s.peak_bytes)) : "-";
  }
  return {};
}

// The per-rank table: the columns that fit `width` (the bubble and peak memory always), in
// side-by-side blocks of ctx.rows_per_block ranks when there are more and the blocks fit.
void draw_summary_table(const PanelContext& ctx, const TraceView& view, const std::string& id,
                        float width) {
  const int n = view.num_ranks();
  const float pad = 2 * ImGui::GetStyle().CellPadding.x + 2;
  std::vector<float> widths(kSummaryColumns, 0);
  for (int c = 0; c < kSummaryColumns; ++c) {
    const auto col = static_cast<SummaryColumn>(c);
    widths[c] = ImGui::CalcTextSize(summary_header(col, view.is_pipeline())).x;
    for (int r = 0; r < n; ++r)
      widths[c] =
          std::max(widths[c], ImGui::CalcTextSize(cell_text(view.summary(r), r, col).c_str()).x);
    widths[c] += pad;
  }
  const std::vector<SummaryColumn> cols = summary_columns(widths, width);
  float table_w = 0;
  for (SummaryColumn c : cols) table_w += widths[static_cast<int>(c)];
  const float gap = 16 * ctx.scale;
  const int per_block = ctx.rows_per_block > 0
                            ? summary_rows_per_block(n, table_w, gap, width, ctx.rows_per_block)
                            : n;
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_NoSavedSettings |
                                ImGuiTableFlags_NoHostExtendX;
  for (int first = 0, block = 0; first < std::max(n, 1); first += std::max(per_block, 1), ++block) {
    if (block > 0) ImGui::SameLine(0, gap);
    if (!ImGui::BeginTable((id + "#" + std::to_string(block)).c_str(),
                           static_cast<int>(cols.size()), flags))
      return;
    for (SummaryColumn c : cols) ImGui::TableSetupColumn(summary_header(c, view.is_pipeline()));
    ImGui::TableHeadersRow();
    for (int r = first; r < std::min(n, first + per_block); ++r) {
      ImGui::TableNextRow();
      for (SummaryColumn c : cols) {
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(cell_text(view.summary(r), r, c).c_str());
      }
    }
    ImGui::EndTable();
    note_item(ctx, "table " + id + " block " + std::to_string(block));
  }
}

}  // namespace

void draw_summary(const PanelContext& ctx, const TraceView& view, const std::string& id) {
  const float width = panel_width(ctx);
  // Measured vs theory, with units (viz/header.cpp); wrapped in a narrow column.
  const std::string predictions = describe_predictions(view);
  const std::string step = view.num_steps() > 1
                               ? "step " + std::to_string(*view.summary_step() + 1) + " of the run"
                               : std::string();
  const std::string line =
      step + (step.empty() || predictions.empty() ? "" : ":    ") + predictions;
  if (!line.empty()) wrapped_line(ctx, line, width, false);
  draw_summary_table(ctx, view, id, width);
  draw_expert_load(ctx, view);
  // On a projector the table and the line above carry the bubble and the peak: with runs side by
  // side or many ranks, the bars would push the page past 1080 rows.
  if (ctx.scale > 1 && (ctx.column_width > 0 || view.num_ranks() > ctx.rows_per_block)) return;
  draw_time_bars(ctx, view);
}

void draw_time_bars(const PanelContext& ctx, const TraceView& view) {
  if (view.num_ranks() == 0) return;
  const Palette& pal = ctx.pal;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeight();
  const float label_w = ImGui::CalcTextSize("GPU 00").x + 10 * ctx.scale;
  const float width = panel_width(ctx), text_gap = 8 * ctx.scale;
  // The most words that leave the bar 100 pixels: all three shares, busy and idle, or idle.
  const MeasureText measure = imgui_measure();
  const std::vector<std::string> templates = {
      "busy 100.0%   comm 100.0% (waiting 100.0%)   idle 100.0%", "busy 100.0%   idle 100.0%",
      "idle 100.0%"};
  const std::string fits =
      longest_fitting(templates, width - label_w - text_gap - 100 * ctx.scale, measure);
  const int level = fits.empty()
                        ? 2
                        : static_cast<int>(std::find(templates.begin(), templates.end(), fits) -
                                           templates.begin());
  const float caption_w = measure(templates[level]);
  const float bar_w = std::round(std::clamp(width - label_w - caption_w - 2 * text_gap,
                                            60 * ctx.scale, 420 * ctx.scale)),
              bar_h = std::round(line * 0.9f), comm_h = std::round(line * 0.45f),
              gap = std::round(6 * ctx.scale);
  ImGui::Spacing();
  wrapped_line(ctx,
               view.summary_step() ? "where the shown step's time goes, per GPU"
                                   : "where the run's time goes, per GPU",
               width, true);
  auto bar = [&](float x, float y, float w, float h, double fraction, ImU32 colour) {
    const float len = static_cast<float>(std::clamp(fraction, 0.0, 1.0)) * w;
    if (len > 0) dl->AddRectFilled({x, y}, {x + len, y + h}, colour);
    return x + len;
  };
  auto text_at = [&](ImVec2 at, const std::string& text) {
    return draw_text(ctx, dl, at, pal.ruler_text, text).x;
  };
  for (int r = 0; r < view.num_ranks(); ++r) {
    const RankSummary& s = view.summary(r);
    const double window = s.busy + s.idle;
    const double busy = window > 0 ? s.busy / window : 0, comm = window > 0 ? s.comm / window : 0;
    const double wait = window > 0 ? s.comm_wait / window : 0;
    const ImVec2 at = ImGui::GetCursorScreenPos();
    const float row_h = bar_h + comm_h + 1;
    text_at({at.x, at.y + (row_h - line) / 2}, "GPU " + std::to_string(r));
    const float x0 = at.x + label_w;
    // Compute lane: busy, then idle (bubble); under it a thinner bar: the comm lane's share.
    dl->AddRectFilled({x0, at.y}, {x0 + bar_w, at.y + row_h}, pal.lane_background);
    const float xb = bar(x0, at.y, bar_w, bar_h, busy, pal.compute);
    bar(xb, at.y, bar_w, bar_h, 1 - busy, pal.idle_hatch);
    const float xw = bar(x0, at.y + bar_h + 1, bar_w, comm_h, comm - wait, pal.comm);
    bar(xw, at.y + bar_h + 1, bar_w, comm_h, wait, pal.comm_wait);
    char text[128];
    if (level == 0)
      std::snprintf(text, sizeof text, "busy %.1f%%   comm %.1f%% (waiting %.1f%%)   idle %.1f%%",
                    100 * busy, 100 * comm, 100 * wait, 100 * (1 - busy));
    else if (level == 1)
      std::snprintf(text, sizeof text, "busy %.1f%%   idle %.1f%%", 100 * busy, 100 * (1 - busy));
    else
      std::snprintf(text, sizeof text, "idle %.1f%%", 100 * (1 - busy));
    const float w = text_at({x0 + bar_w + text_gap, at.y + (row_h - line) / 2}, text);
    ImGui::Dummy({label_w + bar_w + text_gap + w, row_h + gap});
  }
  draw_theory_bars(ctx, view, label_w, bar_w, bar_h, gap);
}

}  // namespace mgpu::viz
