// How the dashboard fits its room (viz/layout.h): ruler labels that never touch, wordings and
// table columns chosen by the width there is, rows shrunk to a height, readable text colours.
#include "viz/layout.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace mgpu::viz {

std::vector<TickLabel> ruler_labels(const TimeAxis& axis, const MeasureText& measure,
                                    float padding) {
  const double right = axis.x0 + axis.width;
  double min_spacing = std::max(8.0, static_cast<double>(padding));
  std::vector<TickLabel> labels;
  for (int attempt = 0; attempt < 12; ++attempt) {  // each attempt: the next 1/2/5 step
    const Ticks ticks = ruler_ticks(axis, min_spacing);
    // Every label with its unit ("1 ms  2 ms"), else the unit on the last one only ("1  2  3 ms").
    for (bool unit_on_each : {true, false}) {
      labels.clear();
      bool apart = true;
      for (double t : ticks.times) {
        TickLabel l{t, static_cast<float>(axis.to_px(t)) + 3, 0,
                    format_time(t - axis.origin, ticks.step)};
        l.width = measure(l.text);
        if (l.x + l.width > right) continue;  // its tick stays, its words would leave the ruler
        labels.push_back(std::move(l));
      }
      if (!unit_on_each) {
        for (size_t i = 0; i + 1 < labels.size(); ++i) {
          const size_t space = labels[i].text.find(' ');
          if (space != std::string::npos) labels[i].text.resize(space);
          labels[i].width = measure(labels[i].text);
        }
      }
      for (size_t i = 1; i < labels.size(); ++i)
        if (labels[i - 1].x + labels[i - 1].width + padding > labels[i].x) apart = false;
      if (apart || ticks.step <= 0) return labels;
    }
    min_spacing = ticks.step / axis.seconds_per_pixel() * 1.01;  // the next coarser step
  }
  return labels;
}

std::string longest_fitting(const std::vector<std::string>& wordings, float width,
                            const MeasureText& measure) {
  for (const std::string& w : wordings)
    if (measure(w) <= width) return w;
  return {};
}

const char* summary_header(SummaryColumn c, bool pipeline) {
  static constexpr std::array<const char*, kSummaryColumns> kNames = {
      "rank", "busy", "comm wire", "comm wait", "idle", "bubble", "overlap", "sent", "peak memory"};
  if (c == SummaryColumn::bubble && !pipeline) return "idle %";
  return kNames[static_cast<int>(c)];
}

std::vector<SummaryColumn> summary_columns(const std::vector<float>& widths, float width) {
  using C = SummaryColumn;
  // What the lesson is about first: whose GPU, its bubble, its memory; then where the time went.
  constexpr C kPriority[] = {C::rank,      C::bubble,    C::peak,    C::idle, C::busy,
                             C::comm_wait, C::comm_wire, C::overlap, C::sent};
  std::vector<C> chosen;
  float used = 0;
  for (C c : kPriority) {
    const float w = widths.at(static_cast<size_t>(c));
    if (chosen.size() >= 3 && used + w > width) break;
    chosen.push_back(c);
    used += w;
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

int summary_rows_per_block(int num_ranks, float table_w, float gap, float width, int max_rows) {
  if (num_ranks <= max_rows || table_w <= 0) return num_ranks;
  const int fit = static_cast<int>((width + gap) / (table_w + gap));  // blocks side by side
  if (fit < 2) return num_ranks;
  const int blocks = std::min(fit, (num_ranks + max_rows - 1) / max_rows);
  return (num_ranks + blocks - 1) / blocks;
}

RowSizes fit_rows(int ranks, float room, RowSizes natural, RowSizes minimum, float row_extra,
                  float strip_extra) {
  const bool strips = natural.strip > 0;
  auto total = [&](const RowSizes& s) {
    return ranks * (2 * s.lane + row_extra + (strips ? s.strip + strip_extra : 0));
  };
  if (room <= 0 || ranks <= 0 || total(natural) <= room) return natural;
  const float fixed = ranks * (row_extra + (strips ? strip_extra : 0));
  const float f = std::max(0.0f, (room - fixed) / (ranks * (2 * natural.lane + natural.strip)));
  RowSizes s;
  s.strip = strips ? std::max(minimum.strip, std::floor(natural.strip * f)) : 0;
  // The lanes take what the strips leave (more than their share when a strip is at its minimum).
  const float lanes_room = room - fixed - ranks * s.strip;
  s.lane = std::clamp(std::floor(lanes_room / (2.0f * ranks)), minimum.lane, natural.lane);
  s.fits = total(s) <= room;
  return s;
}

double relative_luminance(uint32_t colour) {
  auto channel = [&](int shift) {
    const double c = ((colour >> shift) & 0xFF) / 255.0;
    return c <= 0.03928 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * channel(0) + 0.7152 * channel(8) + 0.0722 * channel(16);
}

double contrast_ratio(uint32_t a, uint32_t b) {
  const double la = relative_luminance(a), lb = relative_luminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

uint32_t readable_text(uint32_t background, uint32_t preferred) {
  if (contrast_ratio(background, preferred) >= 4.5) return preferred;
  constexpr uint32_t kBlack = 0xFF000000u, kWhite = 0xFFFFFFFFu;
  return contrast_ratio(background, kBlack) >= contrast_ratio(background, kWhite) ? kBlack : kWhite;
}

}  // namespace mgpu::viz
