// The summary: one row per rank with busy, communication and idle time, bubble and overlap
// percentages and peak memory, and under it what the lesson's theory predicted (trace metadata
// "predictions"), e.g. "bubble 27.3% (theory 27.3%)".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

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

void draw_summary(const PanelContext& ctx, const TraceView& view, const std::string& id) {
  // Measured vs theory, one line, with units (viz/header.cpp).
  std::string line = describe_predictions(view);
  if (view.summary_step())
    line = "step " + std::to_string(*view.summary_step() + 1) + " of the run" +
           (line.empty() ? "" : ":    ") + line;
  if (!line.empty()) ImGui::TextUnformatted(line.c_str());

  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_NoSavedSettings |
                                ImGuiTableFlags_NoHostExtendX;
  if (!ImGui::BeginTable(id.c_str(), 9, flags)) return;
  // Idle time is a "bubble" only in a pipeline schedule (docs/glossary.md).
  const char* idle_share = view.is_pipeline() ? "bubble" : "idle %";
  for (const char* h : {"rank", "busy", "comm wire", "comm wait", "idle", idle_share, "overlap",
                        "sent", "peak memory"}) {
    ImGui::TableSetupColumn(h);
  }
  ImGui::TableHeadersRow();
  for (int r = 0; r < view.num_ranks(); ++r) {
    const RankSummary& s = view.summary(r);
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("GPU %d", r);
    for (const std::string& cell :
         {format_duration(s.busy), format_duration(s.comm_wire), format_duration(s.comm_wait),
          format_duration(s.idle), format_percent(s.bubble),
          s.comm > 0 ? format_percent(s.overlap) : std::string("-"),
          s.bytes_sent > 0 ? format_bytes(static_cast<double>(s.bytes_sent)) : std::string("-"),
          s.peak_bytes > 0 ? format_bytes(static_cast<double>(s.peak_bytes)) : std::string("-")}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(cell.c_str());
    }
  }
  ImGui::EndTable();
  draw_expert_load(ctx, view);
  // Runs side by side on a projector: the table and the line above carry the bubble and the peak;
  // the bars would push the page past 1080 rows.
  if (ctx.column_width > 0 && ctx.scale > 1) return;
  draw_time_bars(ctx, view);
}

void draw_time_bars(const PanelContext& ctx, const TraceView& view) {
  if (view.num_ranks() == 0) return;
  const Palette& pal = ctx.pal;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeight();
  const float label_w = ImGui::CalcTextSize("GPU 00").x + 10 * ctx.scale;
  // As wide as fits beside the longest caption (compare mode puts two summaries side by side).
  const float caption_w = ImGui::CalcTextSize("busy 100.0%   comm 100.0%   idle 100.0%").x;
  const float bar_w = std::round(std::clamp(
                  (ctx.column_width > 0 ? ctx.column_width : ImGui::GetContentRegionAvail().x) -
                      label_w - caption_w - 24 * ctx.scale,
                  120 * ctx.scale, 420 * ctx.scale)),
              bar_h = std::round(line * 0.9f), comm_h = std::round(line * 0.45f),
              gap = std::round(6 * ctx.scale);
  ImGui::Spacing();
  ImGui::TextDisabled(view.summary_step() ? "where the shown step's time goes, per GPU"
                                          : "where the run's time goes, per GPU");
  auto bar = [&](float x, float y, float w, float h, double fraction, ImU32 colour) {
    const float len = static_cast<float>(std::clamp(fraction, 0.0, 1.0)) * w;
    if (len > 0) dl->AddRectFilled({x, y}, {x + len, y + h}, colour);
    return x + len;
  };
  for (int r = 0; r < view.num_ranks(); ++r) {
    const RankSummary& s = view.summary(r);
    const double window = s.busy + s.idle;
    const double busy = window > 0 ? s.busy / window : 0, comm = window > 0 ? s.comm / window : 0;
    const double wait = window > 0 ? s.comm_wait / window : 0;
    const ImVec2 at = ImGui::GetCursorScreenPos();
    char label[16];
    std::snprintf(label, sizeof label, "GPU %d", r);
    dl->AddText({at.x, at.y + (bar_h + comm_h + 1 - line) / 2}, pal.ruler_text, label);
    const float x0 = at.x + label_w;
    // Compute lane: busy, then idle (bubble); under it a thinner bar: the comm lane's share.
    dl->AddRectFilled({x0, at.y}, {x0 + bar_w, at.y + bar_h + comm_h + 1}, pal.lane_background);
    const float xb = bar(x0, at.y, bar_w, bar_h, busy, pal.compute);
    bar(xb, at.y, bar_w, bar_h, 1 - busy, pal.idle_hatch);
    const float xw = bar(x0, at.y + bar_h + 1, bar_w, comm_h, comm - wait, pal.comm);
    bar(xw, at.y + bar_h + 1, bar_w, comm_h, wait, pal.comm_wait);
    char text[128];
    std::snprintf(text, sizeof text, "busy %.1f%%   comm %.1f%% (waiting %.1f%%)   idle %.1f%%",
                  100 * busy, 100 * comm, 100 * wait, 100 * (1 - busy));
    dl->AddText({x0 + bar_w + 8 * ctx.scale, at.y + (bar_h + comm_h + 1 - line) / 2},
                pal.ruler_text, text);
    ImGui::Dummy(
        {label_w + bar_w + 8 * ctx.scale + ImGui::CalcTextSize(text).x, bar_h + comm_h + 1 + gap});
  }
  // Theory vs measured, as bars on one 0..100% scale.
  for (const Measured& m : kMeasured) {
    const auto theory = view.prediction(m.key);
    if (!theory) continue;
    const double measured = m.measure(view);
    for (int k = 0; k < 2; ++k) {
      const ImVec2 at = ImGui::GetCursorScreenPos();
      const std::string name =
          std::string(m.label) + (k == 0 ? " measured (mean over ranks)" : " theory");
      const double value = k == 0 ? measured : *theory;
      const float x0 = at.x + label_w;
      dl->AddRectFilled({x0, at.y}, {x0 + bar_w, at.y + bar_h}, pal.lane_background);
      bar(x0, at.y, bar_w, bar_h, value, k == 0 ? pal.idle_hatch : pal.ruler_line);
      const std::string text = name + " " + format_percent(value);
      dl->AddText({x0 + bar_w + 8 * ctx.scale, at.y + (bar_h - line) / 2}, pal.ruler_text,
                  text.c_str());
      ImGui::Dummy(
          {label_w + bar_w + 8 * ctx.scale + ImGui::CalcTextSize(text.c_str()).x, bar_h + gap});
    }
  }
}

void draw_legend(const PanelContext& ctx, bool any_pipeline) {
  const Palette& p = ctx.pal;
  struct Key {
    const char* name;
    ImU32 colour;
    ImU32 hatch = 0;  // lines over the box, as the timeline draws it (0: none)
  };
  const Key keys[] = {{"forward", p.forward},
                      {"backward", p.backward},
                      {"backward (weights)", p.backward_weight},
                      {"optimizer", p.optimizer},
                      {"other compute", p.compute},
                      {"comm on the wire", p.comm},
                      {"comm waiting for a partner", p.comm_wait, p.comm},
                      {any_pipeline ? "idle (bubble)" : "idle", p.idle_hatch}};
  const float box = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  for (const Key& k : keys) {
    const ImVec2 at = ImGui::GetCursorScreenPos();
    dl->AddRectFilled(at, {at.x + box, at.y + box}, k.colour);
    if (k.hatch) {  // the timeline's hatching, in little
      dl->PushClipRect(at, {at.x + box, at.y + box}, true);
      for (float x = -box; x < box; x += box / 3)
        dl->AddLine({at.x + x, at.y + box}, {at.x + x + box, at.y}, k.hatch);
      dl->PopClipRect();
    }
    ImGui::Dummy({box, box});
    ImGui::SameLine();
    ImGui::TextUnformatted(k.name);
    ImGui::SameLine(0, 14 * ctx.scale);
  }
  ImGui::NewLine();
}

void draw_memory_legend(const PanelContext& ctx) {
  const Palette& p = ctx.pal;
  const float box = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  ImGui::TextDisabled("memory");
  static const char* kMemNames[] = {"parameters",  "gradients",    "optimizer state",
                                    "activations", "comm buffers", "workspace"};
  for (int c = 0; c < 6; ++c) {
    ImGui::SameLine(0, 14 * ctx.scale);
    const ImVec2 at = ImGui::GetCursorScreenPos();
    dl->AddRectFilled(at, {at.x + box, at.y + box}, p.memory[c]);
    ImGui::Dummy({box, box});
    ImGui::SameLine();
    ImGui::TextUnformatted(kMemNames[c]);
  }
  ImGui::SameLine(0, 14 * ctx.scale);
  const ImVec2 at = ImGui::GetCursorScreenPos();
  dl->AddLine({at.x, at.y + box / 2}, {at.x + box, at.y + box / 2}, p.capacity, 2 * ctx.scale);
  ImGui::Dummy({box, box});
  ImGui::SameLine();
  ImGui::TextUnformatted("capacity");
}

}  // namespace mgpu::viz
