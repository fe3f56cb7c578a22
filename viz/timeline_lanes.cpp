// A timeline's lanes: per rank its label, then the compute and comm lanes with their events
// (faded under a highlight) and the compute lane's bubbles, hatched and labelled.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "viz/timeline_internal.h"

namespace mgpu::viz {

using trace::Event;
using trace::Lane;

namespace {

// Text centred in a rectangle, only if it fits; over a hatched part it gets a plain backing in
// the hatch's fill (`backing`, 0: none), so the lines do not run through the letters.
void centred_text(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 colour, const char* text,
                  ImU32 backing = 0) {
  const ImVec2 size = ImGui::CalcTextSize(text);
  if (size.x + 4 > b.x - a.x || size.y > b.y - a.y + 2) return;
  const ImVec2 at{std::floor((a.x + b.x - size.x) / 2), std::floor((a.y + b.y - size.y) / 2)};
  if (backing) dl->AddRectFilled({at.x - 2, at.y}, {at.x + size.x + 2, at.y + size.y}, backing);
  dl->AddText(at, colour, text);
}

// Rank label ("GPU 5  dp1 pp0 tp1" on a mesh) in the left column, centred on its lane group;
// a member of the highlighted group gets a bar beside it and the highlight colour.
void draw_rank_label(const LaneCanvas& c, int r, float x_origin, bool member) {
  const float gy = static_cast<float>(c.layout.group_top(r));
  const float gh = static_cast<float>(c.layout.group_height());
  const Palette& pal = c.ctx.pal;
  if (member)
    c.dl->AddRectFilled({x_origin, gy}, {x_origin + 3 * c.ctx.scale, gy + gh}, pal.partner);
  const std::string label = c.view.rank_label(r);
  const ImVec2 at{x_origin + 6 * c.ctx.scale, gy + (gh - ImGui::GetTextLineHeight()) / 2};
  draw_text(c.ctx, c.dl, at, member ? pal.partner : pal.ruler_text, label);
}

// The compute lane's idle gaps (pipeline bubbles), hatched and labelled with their duration.
// Gaps are disjoint and sorted: binary search the first one that reaches the screen.
void draw_bubbles(const LaneCanvas& c, int r, float y0, float y1) {
  const Palette& pal = c.ctx.pal;
  const auto& gaps = c.view.idle_gaps(r);
  auto first = std::lower_bound(gaps.begin(), gaps.end(), c.ctx.axis.t0,
                                [](const Gap& g, double t) { return g.end < t; });
  for (auto it = first; it != gaps.end() && it->start <= c.ctx.axis.t1; ++it) {
    const Gap& g = *it;
    const ImVec2 a{c.px(g.start), y0}, b{c.px(g.end), y1};
    if (b.x - a.x < 1) continue;
    draw_hatched(c.dl, a, b, bubble_hatch(pal), c.ctx.scale);
    const std::string d = format_duration(g.dur());
    const ImVec2 size = ImGui::CalcTextSize(d.c_str());
    // The label is centred in the gap's visible part, or dropped: never cut at an edge.
    const float la = std::max(a.x, c.x_left), lb = std::min(b.x, c.x_right);
    if (size.x + 6 < lb - la && size.y <= y1 - y0 + 2) {  // a shrunk lane has no room for it
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
    float wait_end = a.x;
    if (lane == Lane::comm && e.wait > 0 && !faded) {
      wait_end = std::min(b.x, c.px(e.start + e.wait));
      if (wait_end > a.x) draw_hatched(c.dl, a, {wait_end, b.y}, comm_wait_hatch(pal), c.ctx.scale);
    }
    if (b.x - a.x >= 4) c.dl->AddRect(a, b, pal.cell_border);
    // Labels go in the cell's visible part (or are dropped), never cut at the window's edge, in a
    // colour that reads on what is behind them: the cell's colour, or the waiting's light fill.
    const ImVec2 la{std::max(a.x, c.x_left), a.y}, lb{std::min(b.x, c.x_right), b.y};
    const bool on_wait = wait_end > (la.x + lb.x) / 2;
    const ImU32 behind = on_wait ? pal.comm_wait : colour;
    const ImU32 text = faded ? pal.cell_text : readable_text(behind, pal.cell_text);
    const ImU32 backing = on_wait ? pal.comm_wait : 0;
    if (e.microbatch >= 0) {
      centred_text(c.dl, la, lb, text, std::to_string(e.microbatch).c_str(), backing);
    } else if (lane == Lane::comm || e.cat == trace::cat::optimizer) {
      // An expert exchange says which one it is ("dispatch", "combine bwd"), not "all_to_all_v".
      const bool exchange = trace::is_dispatch(e) || trace::is_combine(e);
      centred_text(c.dl, la, lb, text, (e.op.empty() || exchange ? e.name : e.op).c_str(), backing);
    }
  }
}

}  // namespace

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

}  // namespace mgpu::viz
