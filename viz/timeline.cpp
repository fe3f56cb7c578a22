// The timeline: a time ruler, then one lane group per rank ("GPU r", on a device mesh "GPU r  dp1
// pp0 tp1": compute above comm). Events are coloured by category with their micro-batch number
// inside when it fits; idle gaps on the compute lane (pipeline bubbles) are hatched and labelled
// with their duration. A highlighted communication group is drawn over everything else dimmed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "viz/panels.h"

namespace mgpu::viz {

using trace::Event;
using trace::Lane;

// ---- palette
// -------------------------------------------------------------------------------------

const Palette& palette(bool presentation) {
  static const Palette dark = {
      .forward = IM_COL32(77, 144, 235, 255),
      .backward = IM_COL32(240, 150, 50, 255),
      .backward_weight = IM_COL32(176, 112, 224, 255),
      .optimizer = IM_COL32(90, 190, 100, 255),
      .compute = IM_COL32(150, 150, 160, 255),
      .comm = IM_COL32(225, 75, 95, 255),
      .idle = IM_COL32(70, 40, 40, 255),
      .idle_hatch = IM_COL32(150, 80, 80, 255),
      .idle_text = IM_COL32(255, 200, 200, 255),
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
      .idle = IM_COL32(255, 225, 225, 255),
      .idle_hatch = IM_COL32(220, 60, 60, 255),
      .idle_text = IM_COL32(150, 0, 0, 255),
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

ImU32 category_colour(const Palette& p, const std::string& c) {
  if (c == trace::cat::forward) return p.forward;
  if (c == trace::cat::backward) return p.backward;
  if (c == trace::cat::backward_weight) return p.backward_weight;
  if (c == trace::cat::optimizer) return p.optimizer;
  if (c == trace::cat::comm) return p.comm;
  return p.compute;
}

// ---- ruler
// ---------------------------------------------------------------------------------------

float draw_ruler(const PanelContext& ctx) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float height = ImGui::GetTextLineHeight() + 8 * ctx.scale;
  const float y_bottom = origin.y + height;
  const Ticks ticks = ruler_ticks(ctx.axis, 90 * ctx.scale);
  for (double t : ticks.times) {
    const float x = static_cast<float>(ctx.axis.to_px(t));
    dl->AddLine({x, y_bottom - 5 * ctx.scale}, {x, y_bottom}, ctx.pal.ruler_line);
    const std::string label = format_time(t - ctx.axis.origin, ticks.step);
    if (x + 3 + ImGui::CalcTextSize(label.c_str()).x > ctx.axis.x0 + ctx.axis.width) continue;
    dl->AddText({x + 3, origin.y}, ctx.pal.ruler_text, label.c_str());
  }
  dl->AddLine({static_cast<float>(ctx.axis.x0), y_bottom},
              {static_cast<float>(ctx.axis.x0 + ctx.axis.width), y_bottom}, ctx.pal.ruler_line);
  ImGui::Dummy({1, height});
  return height;
}

// ---- lanes
// ---------------------------------------------------------------------------------------

namespace {

// Text centred in a rectangle, only if it fits.
void centred_text(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 colour, const char* text) {
  const ImVec2 size = ImGui::CalcTextSize(text);
  if (size.x + 4 > b.x - a.x || size.y > b.y - a.y + 2) return;
  dl->AddText({std::floor((a.x + b.x - size.x) / 2), std::floor((a.y + b.y - size.y) / 2)}, colour,
              text);
}

// `a`, `b` must already be clamped to the visible lane: the line count is then bounded by the
// window width / spacing, whatever the trace's timestamps are.
void hatched_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, const Palette& pal, float spacing) {
  dl->AddRectFilled(a, b, pal.idle);
  dl->PushClipRect(a, b, true);
  const float h = b.y - a.y;
  spacing = std::max(spacing, 2.0f);
  // Start on a multiple of the spacing so the hatching does not shimmer while panning a gap.
  for (float x = std::floor((a.x - h) / spacing) * spacing; x < b.x; x += spacing) {
    dl->AddLine({x, b.y}, {x + h, a.y}, pal.idle_hatch);
  }
  dl->PopClipRect();
}

std::string tooltip_line(const char* key, const std::string& value) {
  return std::string(key) + ": " + value;
}

void event_tooltip(const TraceView& view, int i, double origin) {
  const Event& e = view.event(i);
  ImGui::BeginTooltip();
  ImGui::TextUnformatted(e.name.c_str());
  ImGui::Separator();
  ImGui::Text("%s, %s lane, %s", view.rank_label(e.rank).c_str(), trace::lane_name(e.lane),
              e.cat.c_str());
  ImGui::TextUnformatted(tooltip_line("start", format_duration(e.start - origin)).c_str());
  ImGui::TextUnformatted(tooltip_line("duration", format_duration(e.dur)).c_str());
  if (e.microbatch >= 0) ImGui::Text("micro-batch: %d", e.microbatch);
  if (e.layer >= 0) ImGui::Text("layer: %d", e.layer);
  if (e.chunk >= 0) ImGui::Text("chunk: %d", e.chunk);
  if (e.bytes > 0) ImGui::TextUnformatted(tooltip_line("bytes", format_bytes(e.bytes)).c_str());
  if (e.flops > 0) ImGui::Text("FLOPs: %.3g", e.flops);
  if (e.peer >= 0) ImGui::Text("peer: %s", view.rank_label(e.peer).c_str());
  if (!e.op.empty()) ImGui::Text("op: %s", e.op.c_str());
  if (!e.group.empty())
    ImGui::Text("group: %s%s", e.group.c_str(),
                e.seq >= 0 ? (" #" + std::to_string(e.seq)).c_str() : "");
  ImGui::EndTooltip();
}

}  // namespace

int draw_timeline(const PanelContext& ctx, const TraceView& view, int view_index,
                  const Selection& selection, LaneLayout& layout) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const Palette& pal = ctx.pal;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  layout.top = origin.y;
  layout.lane_height = std::round(ImGui::GetTextLineHeight() + 8 * ctx.scale);
  layout.lane_gap = std::round(2 * ctx.scale);
  layout.group_gap = std::round(8 * ctx.scale);
  const int ranks = view.num_ranks();
  const float height = static_cast<float>(layout.total_height(ranks));
  const TimeAxis& axis = ctx.axis;
  const float x_left = static_cast<float>(axis.x0),
              x_right = static_cast<float>(axis.x0 + axis.width);
  // Pixel x of time t, clamped just outside the lane: far-away times (a zoomed-in view of a long
  // trace) become short off-screen coordinates, so nothing loops over or allocates for them.
  auto px = [&](double t) {
    const double x = axis.to_px(t);
    return static_cast<float>(
        std::clamp(std::isfinite(x) ? x : 0.0, axis.x0 - 64.0, axis.x0 + axis.width + 64.0));
  };

  // The whole area is one invisible button: hover, click, drag and wheel are handled below.
  ImGui::SetCursorScreenPos({x_left, origin.y});
  ImGui::InvisibleButton(("timeline" + std::to_string(view_index)).c_str(),
                         {std::max(1.0f, x_right - x_left), std::max(1.0f, height)});
  const bool hovered = ImGui::IsItemHovered();
  ImGuiIO& io = ImGui::GetIO();
  if (hovered && io.MouseWheel != 0) ctx.axis.zoom(std::pow(1.25, io.MouseWheel), io.MousePos.x);
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2)) {
    ctx.axis.pan(io.MouseDelta.x);
  }

  dl->PushClipRect({origin.x, origin.y}, {x_right + 1, origin.y + height + 1}, true);
  const float hatch = 7 * ctx.scale;
  const std::string& group = selection.highlight;
  const std::vector<int>& members = view.group_ranks(group);
  // With a group highlighted, everything else is drawn faded; the group's events go on top.
  auto fill = [&](ImU32 colour) {
    return group.empty() ? colour : dimmed(colour, pal.lane_background);
  };
  for (int r = 0; r < ranks; ++r) {
    // Rank label ("GPU 5  dp1 pp0 tp1" on a mesh) in the left column, centred on its lane group;
    // a member of the highlighted group gets a bar beside it and the highlight colour.
    const float gy = static_cast<float>(layout.group_top(r));
    const float gh = static_cast<float>(layout.group_height());
    const bool member = std::binary_search(members.begin(), members.end(), r);
    if (member) dl->AddRectFilled({origin.x, gy}, {origin.x + 3 * ctx.scale, gy + gh}, pal.partner);
    dl->AddText({origin.x + 6 * ctx.scale, gy + (gh - ImGui::GetTextLineHeight()) / 2},
                member ? pal.partner : pal.ruler_text, view.rank_label(r).c_str());

    for (Lane lane : {Lane::compute, Lane::comm}) {
      const float y0 = static_cast<float>(layout.lane_top(r, lane));
      const float y1 = y0 + static_cast<float>(layout.lane_height);
      dl->AddRectFilled({x_left, y0}, {x_right, y1}, pal.lane_background);
      dl->PushClipRect({x_left, y0}, {x_right, y1}, true);

      if (lane == Lane::compute) {
        // Bubbles first, so the events are drawn over any rounding at their edges.
        // Gaps are disjoint and sorted: binary search the first one that reaches the screen.
        const auto& gaps = view.idle_gaps(r);
        auto first = std::lower_bound(gaps.begin(), gaps.end(), axis.t0,
                                      [](const Gap& g, double t) { return g.end < t; });
        for (auto it = first; it != gaps.end() && it->start <= axis.t1; ++it) {
          const Gap& g = *it;
          const ImVec2 a{px(g.start), y0}, b{px(g.end), y1};
          if (b.x - a.x < 1) continue;
          hatched_rect(dl, a, b, pal, hatch);
          const std::string d = format_duration(g.dur());
          const ImVec2 size = ImGui::CalcTextSize(d.c_str());
          // The label is centred in the gap's visible part, or dropped: never cut at an edge.
          const float la = std::max(a.x, x_left), lb = std::min(b.x, x_right);
          if (size.x + 6 < lb - la) {
            const ImVec2 at{std::floor((la + lb - size.x) / 2), std::floor((y0 + y1 - size.y) / 2)};
            dl->AddRectFilled({at.x - 2, at.y}, {at.x + size.x + 2, at.y + size.y}, pal.idle);
            dl->AddText(at, pal.idle_text, d.c_str());
          }
        }
      }

      for (const Block& blk : view.visible_blocks(r, lane, axis)) {
        const Event& e = view.event(blk.event);
        ImVec2 a{px(blk.start), y0 + 1}, b{px(blk.end), y1 - 1};
        b.x = std::max(b.x, a.x + 1);  // at least one pixel, so nothing vanishes
        dl->AddRectFilled(a, b, fill(category_colour(pal, e.cat)));
        if (blk.dense()) continue;
        if (b.x - a.x >= 4) dl->AddRect(a, b, pal.cell_border);
        // Labels go in the cell's visible part (or are dropped), never cut at the window's edge.
        const ImVec2 la{std::max(a.x, x_left), a.y}, lb{std::min(b.x, x_right), b.y};
        if (e.microbatch >= 0) {
          centred_text(dl, la, lb, pal.cell_text, std::to_string(e.microbatch).c_str());
        } else if (lane == Lane::comm || e.cat == trace::cat::optimizer) {
          centred_text(dl, la, lb, pal.cell_text, (e.op.empty() ? e.name : e.op).c_str());
        }
      }
      dl->PopClipRect();
    }
  }

  // The highlighted group's events at full colour, outlined, over the faded rest. They come per
  // rank and lane in start order: a run of events less than two pixels apart becomes one
  // rectangle (merged in time, so the walk over a group of 100k events is a few compares each).
  if (!group.empty()) {
    dl->PushClipRect({x_left, origin.y}, {x_right, origin.y + height}, true);
    const double merge_gap = 2 * axis.seconds_per_pixel();
    const TraceView::Span* run = nullptr;  // the run's first event
    double run_end = 0;
    auto flush = [&] {
      if (!run) return;
      const float y0 = static_cast<float>(layout.lane_top(run->rank, run->lane));
      const ImVec2 a{px(run->start), y0},
          b{std::max(px(run_end), px(run->start) + 2), y0 + static_cast<float>(layout.lane_height)};
      dl->AddRectFilled(a, b, category_colour(pal, view.event(run->event).cat));
      dl->AddRect(a, b, pal.partner, 0, 0, 2 * ctx.scale);
      run = nullptr;
    };
    for (const TraceView::Span& e : view.group_spans(group)) {
      if (e.lane == Lane::step || e.end < axis.t0 || e.start > axis.t1) continue;
      if (run && e.rank == run->rank && e.lane == run->lane && e.start <= run_end + merge_gap) {
        run_end = std::max(run_end, e.end);
        continue;
      }
      flush();
      run = &e;
      run_end = e.end;
    }
    flush();
    dl->PopClipRect();
  }

  // Selection: the selected event outlined, its partners outlined in another colour and linked.
  if (selection.view == view_index && selection.event >= 0) {
    auto rect_of = [&](int i) {
      const Event& e = view.event(i);
      const float y0 = static_cast<float>(layout.lane_top(e.rank, e.lane));
      return std::pair<ImVec2, ImVec2>{
          {px(e.start), y0},
          {std::max(px(e.end()), px(e.start) + 2), y0 + static_cast<float>(layout.lane_height)}};
    };
    auto [sa, sb] = rect_of(selection.event);
    const ImVec2 sc{(sa.x + sb.x) / 2, (sa.y + sb.y) / 2};
    if (selection.partners) {
      for (int p : *selection.partners) {
        auto [pa, pb] = rect_of(p);
        dl->AddLine(sc, {(pa.x + pb.x) / 2, (pa.y + pb.y) / 2}, pal.partner, 2 * ctx.scale);
        dl->AddRect(pa, pb, pal.partner, 0, 0, 3 * ctx.scale);
      }
    }
    dl->AddRect(sa, sb, pal.selected, 0, 0, 3 * ctx.scale);
  }
  dl->PopClipRect();

  // Hover tooltip and click-select (a click is a press and release without a drag).
  int clicked = -2;  // -2: no click; -1: click on empty space (clears the selection)
  if (hovered) {
    const auto hit = layout.hit(io.MousePos.y, ranks);
    const double slack = 2 * axis.seconds_per_pixel();
    const int under =
        hit ? view.event_at(hit->first, hit->second, axis.to_time(io.MousePos.x), slack) : -1;
    if (under >= 0 && !ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2))
      event_tooltip(view, under, ctx.axis.origin);
    if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && io.MouseDragMaxDistanceSqr[0] < 9) {
      clicked = under;
    }
  }
  ImGui::SetCursorScreenPos({origin.x, origin.y + height + 4 * ctx.scale});
  ImGui::Dummy({1, 1});
  return clicked;
}

}  // namespace mgpu::viz
