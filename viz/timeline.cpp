// The timeline: a time ruler, then one lane group per rank ("GPU r", on a device mesh "GPU r  dp1
// pp0 tp1": compute above comm). Events are coloured by category with their micro-batch number
// inside when it fits; idle gaps on the compute lane (pipeline bubbles) are hatched and labelled
// with their duration. A highlighted communication group is drawn over everything else dimmed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "viz/panels.h"
#include "viz/timeline_internal.h"

namespace mgpu::viz {

using trace::Event;
using trace::Lane;

// ---- ruler
// ---------------------------------------------------------------------------------------

float draw_ruler(const PanelContext& ctx) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float line = ImGui::GetTextLineHeight();
  const float height = line + 8 * ctx.scale;
  const float y_bottom = origin.y + height;
  // The finest 1/2/5 step whose labels stand apart: a narrow column still reads "0 1 ms 2 ms".
  for (const TickLabel& l : ruler_labels(ctx.axis, imgui_measure(), 12 * ctx.scale)) {
    const float x = static_cast<float>(ctx.axis.to_px(l.time));
    dl->AddLine({x, y_bottom - 5 * ctx.scale}, {x, y_bottom}, ctx.pal.ruler_line);
    dl->AddText({l.x, origin.y}, ctx.pal.ruler_text, l.text.c_str());
    note_text(ctx, {l.x, origin.y}, {l.x + l.width, origin.y + line}, l.text);
  }
  dl->AddLine({static_cast<float>(ctx.axis.x0), y_bottom},
              {static_cast<float>(ctx.axis.x0 + ctx.axis.width), y_bottom}, ctx.pal.ruler_line);
  ImGui::Dummy({1, height});
  return height;
}

int draw_timeline(const PanelContext& ctx, const TraceView& view, int view_index,
                  const Selection& selection, LaneLayout& layout) {
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  layout.top = origin.y;
  // Rows shrunk to fit the room (ctx.lane_height) keep a smaller gap between GPUs.
  layout.lane_height = ctx.lane_height > 0 ? ctx.lane_height
                                           : std::round(ImGui::GetTextLineHeight() + 8 * ctx.scale);
  layout.lane_gap = std::round(2 * ctx.scale);
  layout.group_gap = std::round((ctx.lane_height > 0 ? 4 : 8) * ctx.scale);
  const float height = static_cast<float>(layout.total_height(view.num_ranks()));
  const LaneCanvas canvas{ctx,
                          view,
                          layout,
                          ImGui::GetWindowDrawList(),
                          static_cast<float>(ctx.axis.x0),
                          static_cast<float>(ctx.axis.x0 + ctx.axis.width)};

  // The whole area is one invisible button: hover, click, drag and wheel are handled here.
  ImGui::SetCursorScreenPos({canvas.x_left, origin.y});
  ImGui::InvisibleButton(("timeline" + std::to_string(view_index)).c_str(),
                         {std::max(1.0f, canvas.x_right - canvas.x_left), std::max(1.0f, height)});
  const bool hovered = ImGui::IsItemHovered();
  const ImGuiIO& io = ImGui::GetIO();
  if (hovered && io.MouseWheel != 0) ctx.axis.zoom(std::pow(1.25, io.MouseWheel), io.MousePos.x);
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2)) {
    ctx.axis.pan(io.MouseDelta.x);
  }

  canvas.dl->PushClipRect({origin.x, origin.y}, {canvas.x_right + 1, origin.y + height + 1}, true);
  // With a group highlighted, everything else is drawn faded; the group's events go on top.
  draw_ranks(canvas, origin.x, selection.highlight);
  if (!selection.highlight.empty())
    draw_group_highlight(canvas, selection.highlight, origin.y, height);
  if (selection.view == view_index && selection.event >= 0) draw_selection(canvas, selection);
  canvas.dl->PopClipRect();

  const int clicked = hovered ? hover_and_click(ctx, view, layout) : -2;
  ImGui::SetCursorScreenPos({origin.x, origin.y + height + 4 * ctx.scale});
  ImGui::Dummy({1, 1});
  return clicked;
}

}  // namespace mgpu::viz
