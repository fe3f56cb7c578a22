// Internal to the ASCII timeline: the grid of columns its rows and ruler share, and the time
// axis (ascii_timeline_axis.cpp) that ascii_timeline.cpp draws above the rows and in the legend.
#pragma once
#include <algorithm>
#include <string>

#include "core/trace/analysis.h"
#include "core/trace/ascii_timeline.h"

namespace mgpu::trace::timeline_detail {

// The columns of every row and of the ruler: the window cut into cells of equal time.
struct Grid {
  Interval window;
  int columns = 0;
  double cell = 0;  // seconds per column
  int column_of(double t) const {
    return std::clamp(static_cast<int>((t - window.begin) / cell), 0, columns - 1);
  }
};

std::string format_duration(double seconds);

std::string render_ruler(const Grid& g, int label_width, const AsciiTimelineOptions& opt);

}  // namespace mgpu::trace::timeline_detail
