// How the dashboard fits its room: pure functions (no ImGui) that decide what goes where, so a
// test can check them at 1920 pixels without a window.
//
//   ruler_labels      the ruler's tick labels: a 1/2/5 step whose labels never touch
//   longest_fitting   of several wordings of one figure, the longest that fits a width
//   summary_columns   the per-rank table's columns that fit a column of the window (the bubble
//                     and the peak memory first), and into how many side-by-side blocks of ranks
//   fit_rows          the height of a GPU row (and a memory strip) so every rank fits a height
//   readable_text     black or white text, whichever reads on a background (contrast >= 4.5)
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "viz/view_model.h"

namespace mgpu::viz {

// A text's width in pixels (ImGui::CalcTextSize in the dashboard; a fixed width per character in
// tests).
using MeasureText = std::function<float(const std::string&)>;

// A rectangle of text in window pixels (what a test checks for overprint).
struct TextBox {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int view = -1;  // the compared run it belongs to (-1: the header, shared)
  std::string text;
  bool overlaps(const TextBox& o) const { return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1; }
};

// ---- the ruler
struct TickLabel {
  double time = 0;  // absolute (axis.to_px(time) is the tick)
  float x = 0;      // where the label starts (just right of its tick)
  float width = 0;
  std::string text;
};
// Labels for the ruler of `axis`: ticks on a 1/2/5 step, the finest step whose labels are
// `padding` pixels apart at least; a label that would cross the axis' right end is dropped (its
// tick stays). A ruler a few hundred pixels wide still gets three or more labels.
std::vector<TickLabel> ruler_labels(const TimeAxis& axis, const MeasureText& measure,
                                    float padding);

// ---- words that fit
// The first of `wordings` (longest first) that fits `width`; "" when none does.
std::string longest_fitting(const std::vector<std::string>& wordings, float width,
                            const MeasureText& measure);

// ---- the summary table
enum class SummaryColumn { rank, busy, comm_wire, comm_wait, idle, bubble, overlap, sent, peak };
inline constexpr int kSummaryColumns = 9;
// The header of each column ("bubble" reads "idle %" outside a pipeline).
const char* summary_header(SummaryColumn c, bool pipeline);
// The columns that fit `width` given each column's width (display order, all nine if they fit):
// rank, the bubble and the peak memory always, then idle, busy, comm wait, comm wire, overlap,
// sent as room allows.
std::vector<SummaryColumn> summary_columns(const std::vector<float>& widths, float width);
// Ranks per block when the table is split into side-by-side blocks of ranks: `num_ranks` when it
// is one block. Blocks are used when the rows are more than `max_rows` and two or more blocks
// `table_w` wide (with `gap` between) fit `width`.
int summary_rows_per_block(int num_ranks, float table_w, float gap, float width, int max_rows);

// ---- rows that fit a height
struct RowSizes {
  float lane = 0;    // one lane (a GPU row is two)
  float strip = 0;   // one memory strip (0: not drawn)
  bool fits = true;  // false: even the smallest rows are taller than the room (the page scrolls)
};
// Shrinks lanes and memory strips (never grows them) so `ranks` GPU rows, each two lanes plus
// `row_extra` pixels, and their memory strips (each `strip_extra` pixels more) fill at most
// `room` pixels; no smaller than min_lane / min_strip. room <= 0: the natural sizes.
RowSizes fit_rows(int ranks, float room, RowSizes natural, RowSizes minimum, float row_extra,
                  float strip_extra);

// ---- colours (IM_COL32 layout: red in the low byte)
double relative_luminance(uint32_t colour);
double contrast_ratio(uint32_t a, uint32_t b);
// `preferred` when it reads on `background` (contrast >= 4.5, WCAG AA), else black or white,
// whichever contrasts more.
uint32_t readable_text(uint32_t background, uint32_t preferred);

}  // namespace mgpu::viz
