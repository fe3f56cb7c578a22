// Internal to viz/timeline*.cpp: what one view's timeline draws with, and the parts of
// draw_timeline that live in their own files (lanes, overlays, hover).
#pragma once
#include <algorithm>
#include <cmath>
#include <string>

#include "viz/panels.h"

namespace mgpu::viz {

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

// timeline_lanes.cpp: every rank's label, lanes, bubbles and events.
void draw_ranks(const LaneCanvas& c, float x_origin, const std::string& group);

// timeline_overlays.cpp: the highlighted group's events over the faded rest, and the selected
// event with its partners.
void draw_group_highlight(const LaneCanvas& c, const std::string& group, float top, float height);
void draw_selection(const LaneCanvas& c, const Selection& selection);

// timeline_hover.cpp: hover tooltip and click-select; the event clicked, -1 for a click on empty
// space, -2 when nothing was clicked.
int hover_and_click(const PanelContext& ctx, const TraceView& view, const LaneLayout& layout);

}  // namespace mgpu::viz
