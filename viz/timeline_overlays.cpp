// What a timeline draws over its lanes: the highlighted communication group at full colour, and
// the selected event linked to its partners.
#include <algorithm>
#include <string>
#include <utility>

#include "viz/timeline_internal.h"

namespace mgpu::viz {

using trace::Event;
using trace::Lane;

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

}  // namespace mgpu::viz
