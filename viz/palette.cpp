// The dashboard's colours: the ImGui dark theme by default, a light high-contrast theme for
// presentation mode; events are coloured by trace category, memory by allocator category.
#include <algorithm>
#include <cmath>
#include <string>

#include "viz/panels.h"

namespace mgpu::viz {

const Palette& palette(bool presentation) {
  static const Palette dark = {
      .forward = IM_COL32(77, 144, 235, 255),
      .backward = IM_COL32(240, 150, 50, 255),
      .backward_weight = IM_COL32(176, 112, 224, 255),
      .optimizer = IM_COL32(90, 190, 100, 255),
      .compute = IM_COL32(150, 150, 160, 255),
      .comm = IM_COL32(225, 75, 95, 255),
      .comm_wait = IM_COL32(95, 45, 55, 255),
      .idle = IM_COL32(58, 50, 24, 255),
      .idle_hatch = IM_COL32(185, 150, 55, 255),
      .idle_text = IM_COL32(255, 228, 150, 255),
      .cell_text = IM_COL32(10, 10, 10, 255),
      .cell_border = IM_COL32(20, 20, 25, 255),
      .lane_background = IM_COL32(40, 42, 48, 255),
      .ruler_text = IM_COL32(220, 220, 220, 255),
      .ruler_line = IM_COL32(90, 90, 100, 255),
      .selected = IM_COL32(255, 255, 255, 255),
      .partner = IM_COL32(255, 230, 0, 255),
      .capacity = IM_COL32(255, 60, 60, 255),
      .peak = IM_COL32(255, 255, 255, 255),
      .memory = {IM_COL32(96, 120, 160, 255), IM_COL32(205, 175, 70, 255),
                 IM_COL32(150, 95, 170, 255), IM_COL32(70, 170, 150, 255),
                 IM_COL32(200, 95, 95, 255), IM_COL32(130, 130, 130, 255)},
  };
  static const Palette light = {
      .forward = IM_COL32(0, 90, 220, 255),
      .backward = IM_COL32(255, 120, 0, 255),
      .backward_weight = IM_COL32(140, 40, 200, 255),
      .optimizer = IM_COL32(0, 160, 40, 255),
      .compute = IM_COL32(110, 110, 110, 255),
      .comm = IM_COL32(220, 0, 40, 255),
      .comm_wait = IM_COL32(255, 215, 220, 255),
      .idle = IM_COL32(255, 244, 196, 255),
      .idle_hatch = IM_COL32(205, 145, 0, 255),
      .idle_text = IM_COL32(95, 60, 0, 255),
      .cell_text = IM_COL32(255, 255, 255, 255),
      .cell_border = IM_COL32(0, 0, 0, 255),
      .lane_background = IM_COL32(235, 235, 235, 255),
      .ruler_text = IM_COL32(0, 0, 0, 255),
      .ruler_line = IM_COL32(150, 150, 150, 255),
      .selected = IM_COL32(0, 0, 0, 255),
      .partner = IM_COL32(255, 0, 200, 255),
      .capacity = IM_COL32(220, 0, 0, 255),
      .peak = IM_COL32(0, 0, 0, 255),
      .memory = {IM_COL32(60, 90, 150, 255), IM_COL32(220, 170, 0, 255),
                 IM_COL32(150, 60, 170, 255), IM_COL32(0, 150, 130, 255),
                 IM_COL32(200, 60, 60, 255), IM_COL32(120, 120, 120, 255)},
  };
  return presentation ? light : dark;
}

ImU32 dimmed(ImU32 colour, ImU32 background) {
  // 25% of the colour over 75% of the background, channel by channel (alpha stays opaque).
  ImU32 out = IM_COL32_A_MASK;
  for (int shift : {IM_COL32_R_SHIFT, IM_COL32_G_SHIFT, IM_COL32_B_SHIFT}) {
    const ImU32 c = (colour >> shift) & 0xFF, b = (background >> shift) & 0xFF;
    out |= ((c + 3 * b) / 4) << shift;
  }
  return out;
}

Hatch bubble_hatch(const Palette& p) {
  return {p.idle, p.idle_hatch, false, 7};
}

Hatch comm_wait_hatch(const Palette& p) {
  return {p.comm_wait, p.comm, true, 5};
}

void draw_hatched(ImDrawList* dl, ImVec2 a, ImVec2 b, const Hatch& h, float scale) {
  dl->AddRectFilled(a, b, h.fill);
  dl->PushClipRect(a, b, true);
  const float height = b.y - a.y;
  const float spacing = std::max(h.spacing * scale, 2.0f);
  // Start on a multiple of the spacing so the hatching does not shimmer while panning a gap.
  for (float x = std::floor((a.x - height) / spacing) * spacing; x < b.x; x += spacing) {
    if (h.rising)
      dl->AddLine({x, b.y}, {x + height, a.y}, h.lines);
    else
      dl->AddLine({x, a.y}, {x + height, b.y}, h.lines);
  }
  dl->PopClipRect();
}

void note_text(const PanelContext& ctx, ImVec2 a, ImVec2 b, const std::string& text) {
  if (ctx.texts) ctx.texts->push_back({a.x, a.y, b.x, b.y, ctx.view, text});
}

ImVec2 draw_text(const PanelContext& ctx, ImDrawList* dl, ImVec2 at, ImU32 colour,
                 const std::string& text) {
  dl->AddText(at, colour, text.c_str());
  const ImVec2 size = ImGui::CalcTextSize(text.c_str());
  note_text(ctx, at, {at.x + size.x, at.y + size.y}, text);
  return size;
}

void note_item(const PanelContext& ctx, const std::string& text) {
  note_text(ctx, ImGui::GetItemRectMin(), ImGui::GetItemRectMax(), text);
}

float panel_width(const PanelContext& ctx) {
  return ctx.column_width > 0 ? ctx.column_width : ImGui::GetContentRegionAvail().x;
}

MeasureText imgui_measure() {
  return [](const std::string& s) { return ImGui::CalcTextSize(s.c_str()).x; };
}

ImU32 category_colour(const Palette& p, const std::string& c) {
  if (c == trace::cat::forward) return p.forward;
  if (c == trace::cat::backward) return p.backward;
  if (c == trace::cat::backward_weight) return p.backward_weight;
  if (c == trace::cat::optimizer) return p.optimizer;
  if (c == trace::cat::comm) return p.comm;
  return p.compute;
}

}  // namespace mgpu::viz
