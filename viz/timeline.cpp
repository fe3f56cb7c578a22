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
void hatched(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 fill, ImU32 lines, float spacing) {
  dl->AddRectFilled(a, b, fill);
  dl->PushClipRect(a, b, true);
  const float h = b.y - a.y;
  spacing = std::max(spacing, 2.0f);
  // Start on a multiple of the spacing so the hatching does not shimmer while panning a gap.
  for (float x = std::floor((a.x - h) / spacing) * spacing; x < b.x; x += spacing) {
    dl->AddLine({x, b.y}, {x + h, a.y}, lines);
  }
  dl->PopClipRect();
}

void hatched_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, const Palette& pal, float spacing) {
  hatched(dl, a, b, pal.idle, pal.idle_hatch, spacing);
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
  if (e.wait > 0)
    ImGui::TextUnformatted(
        tooltip_line("waiting for a partner", format_duration(e.wait) + ", then on the wire " +
                                                  format_duration(e.dur - e.wait))
            .c_str());
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

// What every part of one view's timeline draws with.
struct LaneCanvas {
  const PanelContext& ctx;
  const TraceView& view;
  const LaneLayout& layout;
  ImDrawList* dl;
  float x_left, x_right;
  // Pixel x of time t, clamped just outside the lane: far-away times (a zoomed-in view of a long
  // trace) become short off-screen coordinates, so nothing loops over or allocates for them.
  float px(double t) const {
    const TimeAxis& axis = ctx.axis;
    const double x = axis.to_px(t);
    return static_cast<float>(
        std::clamp(std::isfinite(x) ? x : 0.0, axis.x0 - 64.0, axis.x0 + axis.width + 64.0));
  }
};

// Rank label ("GPU 5  dp1 pp0 tp1" on a mesh) in the left column, centred on its lane group;
// a member of the highlighted group gets a bar beside it and the highlight colour.
void draw_rank_label(const LaneCanvas& c, int r, float x_origin, bool member) {
  const float gy = static_cast<float>(c.layout.group_top(r));
  const float gh = static_cast<float>(c.layout.group_height());
  const Palette& pal = c.ctx.pal;
  if (member)
    c.dl->AddRectFilled({x_origin, gy}, {x_origin + 3 * c.ctx.scale, gy + gh}, pal.partner);
  c.dl->AddText({x_origin + 6 * c.ctx.scale, gy + (gh - ImGui::GetTextLineHeight()) / 2},
                member ? pal.partner : pal.ruler_text, c.view.rank_label(r).c_str());
}

// The compute lane's idle gaps (pipeline bubbles), hatched and labelled with their duration.
// Gaps are disjoint and sorted: binary search the first one that reaches the screen.
void draw_bubbles(const LaneCanvas& c, int r, float y0, float y1) {
  const Palette& pal = c.ctx.pal;
  const float hatch = 7 * c.ctx.scale;
  const auto& gaps = c.view.idle_gaps(r);
  auto first = std::lower_bound(gaps.begin(), gaps.end(), c.ctx.axis.t0,
                                [](const Gap& g, double t) { return g.end < t; });
  for (auto it = first; it != gaps.end() && it->start <= c.ctx.axis.t1; ++it) {
    const Gap& g = *it;
    const ImVec2 a{c.px(g.start), y0}, b{c.px(g.end), y1};
    if (b.x - a.x < 1) continue;
    hatched_rect(c.dl, a, b, pal, hatch);
    const std::string d = format_duration(g.dur());
    const ImVec2 size = ImGui::CalcTextSize(d.c_str());
    // The label is centred in the gap's visible part, or dropped: never cut at an edge.
    const float la = std::max(a.x, c.x_left), lb = std::min(b.x, c.x_right);
    if (size.x + 6 < lb - la) {
      const ImVec2 at{std::floor((la + lb - size.x) / 2), std::floor((y0 + y1 - size.y) / 2)};
      c.dl->AddRectFilled({at.x - 2, at.y}, {at.x + size.x + 2, at.y + size.y}, pal.idle);
      c.dl->AddText(at, pal.idle_text, d.c_str());
    }
  }
}

// One lane's events, coloured by category (faded when a group is highlighted), with the
// micro-batch (or the collective's op) inside when it fits.
void draw_lane_events(const LaneCanvas& c, int r, Lane lane, float y0, float y1, bool faded) {
  const Palette& pal = c.ctx.pal;
  for (const Block& blk : c.view.visible_blocks(r, lane, c.ctx.axis)) {
    const Event& e = c.view.event(blk.event);
    ImVec2 a{c.px(blk.start), y0 + 1}, b{c.px(blk.end), y1 - 1};
    b.x = std::max(b.x, a.x + 1);  // at least one pixel, so nothing vanishes
    const ImU32 colour = category_colour(pal, e.cat);
    c.dl->AddRectFilled(a, b, faded ? dimmed(colour, pal.lane_background) : colour);
    if (blk.dense()) continue;
    // Its waiting for a partner (counted from its start, as the analysis does): hatched, lighter.
    if (lane == Lane::comm && e.wait > 0 && !faded) {
      const float wait_end = std::min(b.x, c.px(e.start + e.wait));
      if (wait_end > a.x) hatched(c.dl, a, {wait_end, b.y}, pal.comm_wait, colour, 5 * c.ctx.scale);
    }
    if (b.x - a.x >= 4) c.dl->AddRect(a, b, pal.cell_border);
    // Labels go in the cell's visible part (or are dropped), never cut at the window's edge.
    const ImVec2 la{std::max(a.x, c.x_left), a.y}, lb{std::min(b.x, c.x_right), b.y};
    if (e.microbatch >= 0) {
      centred_text(c.dl, la, lb, pal.cell_text, std::to_string(e.microbatch).c_str());
    } else if (lane == Lane::comm || e.cat == trace::cat::optimizer) {
      // An expert exchange says which one it is ("dispatch", "combine bwd"), not "all_to_all_v".
      const bool exchange = trace::is_dispatch(e) || trace::is_combine(e);
      centred_text(c.dl, la, lb, pal.cell_text, (e.op.empty() || exchange ? e.name : e.op).c_str());
    }
  }
}

// Every rank's label, lanes, bubbles and events.
void draw_ranks(const LaneCanvas& c, float x_origin, const std::string& group) {
  const std::vector<int>& members = c.view.group_ranks(group);
  for (int r = 0; r < c.view.num_ranks(); ++r) {
    draw_rank_label(c, r, x_origin, std::binary_search(members.begin(), members.end(), r));
    for (Lane lane : {Lane::compute, Lane::comm}) {
      const float y0 = static_cast<float>(c.layout.lane_top(r, lane));
      const float y1 = y0 + static_cast<float>(c.layout.lane_height);
      c.dl->AddRectFilled({c.x_left, y0}, {c.x_right, y1}, c.ctx.pal.lane_background);
      c.dl->PushClipRect({c.x_left, y0}, {c.x_right, y1}, true);
      // Bubbles first, so the events are drawn over any rounding at their edges.
      if (lane == Lane::compute) draw_bubbles(c, r, y0, y1);
      draw_lane_events(c, r, lane, y0, y1, /*faded=*/!group.empty());
      c.dl->PopClipRect();
    }
  }
}

// The highlighted group's events at full colour, outlined, over the faded rest. They come per
// rank and lane in start order: a run of events less than two pixels apart becomes one
// rectangle (merged in time, so the walk over a group of 100k events is a few compares each).
void draw_group_highlight(const LaneCanvas& c, const std::string& group, float top, float height) {
  const TimeAxis& axis = c.ctx.axis;
  c.dl->PushClipRect({c.x_left, top}, {c.x_right, top + height}, true);
  const double merge_gap = 2 * axis.seconds_per_pixel();
  const TraceView::Span* run = nullptr;  // the run's first event
  double run_end = 0;
  auto flush = [&] {
    if (!run) return;
    const float y0 = static_cast<float>(c.layout.lane_top(run->rank, run->lane));
    const ImVec2 a{c.px(run->start), y0}, b{std::max(c.px(run_end), c.px(run->start) + 2),
                                            y0 + static_cast<float>(c.layout.lane_height)};
    c.dl->AddRectFilled(a, b, category_colour(c.ctx.pal, c.view.event(run->event).cat));
    c.dl->AddRect(a, b, c.ctx.pal.partner, 0, 0, 2 * c.ctx.scale);
    run = nullptr;
  };
  for (const TraceView::Span& e : c.view.group_spans(group)) {
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
  c.dl->PopClipRect();
}

// The selected event outlined, its partners outlined in another colour and linked to it.
void draw_selection(const LaneCanvas& c, const Selection& selection) {
  auto rect_of = [&](int i) {
    const Event& e = c.view.event(i);
    const float y0 = static_cast<float>(c.layout.lane_top(e.rank, e.lane));
    return std::pair<ImVec2, ImVec2>{{c.px(e.start), y0},
                                     {std::max(c.px(e.end()), c.px(e.start) + 2),
                                      y0 + static_cast<float>(c.layout.lane_height)}};
  };
  const float scale = c.ctx.scale;
  auto [sa, sb] = rect_of(selection.event);
  const ImVec2 sc{(sa.x + sb.x) / 2, (sa.y + sb.y) / 2};
  if (selection.partners) {
    for (int p : *selection.partners) {
      auto [pa, pb] = rect_of(p);
      c.dl->AddLine(sc, {(pa.x + pb.x) / 2, (pa.y + pb.y) / 2}, c.ctx.pal.partner, 2 * scale);
      c.dl->AddRect(pa, pb, c.ctx.pal.partner, 0, 0, 3 * scale);
    }
  }
  c.dl->AddRect(sa, sb, c.ctx.pal.selected, 0, 0, 3 * scale);
}

// Hover tooltip and click-select (a click is a press and release without a drag). Returns the
// event clicked, -1 for a click on empty space, -2 when nothing was clicked.
int hover_and_click(const PanelContext& ctx, const TraceView& view, const LaneLayout& layout) {
  const ImGuiIO& io = ImGui::GetIO();
  const auto hit = layout.hit(io.MousePos.y, view.num_ranks());
  const double slack = 2 * ctx.axis.seconds_per_pixel();
  const int under =
      hit ? view.event_at(hit->first, hit->second, ctx.axis.to_time(io.MousePos.x), slack) : -1;
  if (under >= 0 && !ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2))
    event_tooltip(view, under, ctx.axis.origin);
  if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && io.MouseDragMaxDistanceSqr[0] < 9)
    return under;
  return -2;
}

}  // namespace

int draw_timeline(const PanelContext& ctx, const TraceView& view, int view_index,
                  const Selection& selection, LaneLayout& layout) {
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  layout.top = origin.y;
  layout.lane_height = std::round(ImGui::GetTextLineHeight() + 8 * ctx.scale);
  layout.lane_gap = std::round(2 * ctx.scale);
  layout.group_gap = std::round(8 * ctx.scale);
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
