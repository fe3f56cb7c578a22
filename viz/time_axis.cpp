// The shared time axis (fit, zoom about a point, pan), and how times and sizes are written on the
// ruler, the cells and the summary: one format everywhere, so the same figure reads the same.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "viz/view_model.h"

namespace mgpu::viz {

void TimeAxis::fit(double start, double end, double margin_fraction) {
  if (!(end > start)) end = start + 1e-6;  // an empty or instantaneous trace still gets a scale
  const double margin = (end - start) * margin_fraction;
  t0 = start - margin;
  t1 = end + margin;
}

void TimeAxis::zoom(double factor, double anchor_px) {
  const double anchor_t = to_time(anchor_px);
  const double span = std::max((t1 - t0) / factor, 1e-12);  // never collapse to nothing
  const double frac = (anchor_px - x0) / width;
  t0 = anchor_t - frac * span;
  t1 = t0 + span;
}

void TimeAxis::pan(double dx_px) {
  const double dt = dx_px * seconds_per_pixel();
  t0 -= dt;
  t1 -= dt;
}

// ---- formatting
// ----------------------------------------------------------------------------------

namespace {
struct Unit {
  double scale;
  const char* name;
};
Unit unit_for(double magnitude) {
  if (magnitude < 1e-6) return {1e9, "ns"};
  if (magnitude < 1e-3) return {1e6, "us"};
  if (magnitude < 1) return {1e3, "ms"};
  return {1, "s"};
}
std::string printf_string(const char* fmt, double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}
}  // namespace

std::string format_time(double seconds, double step) {
  if (seconds == 0) return "0";
  // The unit of ten steps: "2.5 us" rather than "2500 ns" for 0.5 us ticks.
  const Unit u = unit_for(std::abs(step) * 10);
  // Enough decimals to tell neighbouring ticks apart.
  const double step_in_unit = std::abs(step) * u.scale;
  const char* fmt = step_in_unit >= 1 ? "%.0f %s" : step_in_unit >= 0.1 ? "%.1f %s" : "%.2f %s";
  return printf_string(fmt, seconds * u.scale, u.name);
}

std::string format_duration(double seconds) {
  if (seconds == 0) return "0";
  const Unit u = unit_for(std::abs(seconds));
  const double v = seconds * u.scale;
  return printf_string(v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, u.name);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return printf_string(u == 0 ? "%.0f %s" : bytes >= 100 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
}

Ticks ruler_ticks(const TimeAxis& axis, double min_spacing_px) {
  Ticks ticks;
  const double min_step = min_spacing_px * axis.seconds_per_pixel();
  if (!(min_step > 0) || !std::isfinite(min_step)) return ticks;
  const double pow10 = std::pow(10.0, std::floor(std::log10(min_step)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    ticks.step = m * pow10;
    if (ticks.step >= min_step) break;
  }
  for (double k = std::ceil((axis.t0 - axis.origin) / ticks.step);; k += 1) {
    double rel = k * ticks.step;
    if (std::abs(rel) < ticks.step * 1e-9) rel = 0.0;
    const double t = axis.origin + rel;
    if (t > axis.t1) break;
    ticks.times.push_back(t);
  }
  return ticks;
}

}  // namespace mgpu::viz
