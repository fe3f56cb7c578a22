// The timeline's time axis: a unit that suits the window's length, ticks at 1, 2 or 5 x 10^k of
// it, and the ruler drawn above the rows.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/trace/ascii_timeline.h"
#include "core/trace/ascii_timeline_internal.h"

namespace mgpu::trace {

namespace {

// ---- Time axis ----
struct Unit {
  const char* name;
  double per_second;
};

Unit unit_for(double span) {
  if (span < 1e-6) return {"ns", 1e9};
  if (span < 1e-3) return {"us", 1e6};
  if (span < 1) return {"ms", 1e3};
  return {"s", 1};
}

// The smallest of 1, 2, 5 x 10^k that is at least `rough`.
double nice_step(double rough) {
  const double decade = std::pow(10.0, std::floor(std::log10(rough)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * decade >= rough) return m * decade;
  }
  return 10 * decade;
}

}  // namespace

namespace timeline_detail {

std::string format_duration(double seconds) {
  const Unit u = unit_for(seconds * 1.0001);
  return fmt::format("{:.3g} {}", seconds * u.per_second, u.name);
}

// Two lines: tick labels, then tick marks.
std::string render_ruler(const Grid& g, int label_width, const AsciiTimelineOptions& opt) {
  const double span = g.window.length();
  const Unit unit = unit_for(span);
  const double step = nice_step(span / std::max(1, g.columns / 10));
  std::string numbers(g.columns, ' ');
  std::vector<std::string> marks(g.columns, opt.unicode ? "─" : "-");
  int free_from = 0;  // first column a new number may start at
  for (int k = 0;; ++k) {
    const double t = k * step;
    const int c = static_cast<int>(std::lround(t / g.cell));
    if (c >= g.columns) break;
    marks[c] = opt.unicode ? "┼" : "+";
    const std::string text = fmt::format("{:g}", t * unit.per_second);
    if (c >= free_from && c + static_cast<int>(text.size()) <= g.columns) {
      numbers.replace(c, text.size(), text);
      free_from = c + static_cast<int>(text.size()) + 1;
    }
  }
  numbers.erase(numbers.find_last_not_of(' ') + 1);
  std::string out =
      fmt::format("{:<{}} {}\n", fmt::format("time ({})", unit.name), label_width, numbers);
  out += std::string(label_width + 1, ' ');
  for (const auto& m : marks) out += m;
  return out + "\n";
}

}  // namespace timeline_detail

}  // namespace mgpu::trace
