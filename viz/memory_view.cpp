// Memory per rank: a strip per GPU with the bytes of each category stacked (parameters at the
// bottom, then gradients, optimizer state, activations, comm buffers, workspace), drawn on the
// timeline's time axis. The peak is marked, and the device capacity drawn as a line when the
// trace's profile gives it. All strips (of every compared run too) share one vertical scale so
// ranks and runs compare at a glance.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "viz/panels.h"

namespace mgpu::viz {

namespace {
constexpr int kModelStateCategories = 3;  // parameters, gradients, optimizer state
}

int64_t max_model_states(const TraceView& view) {
  int64_t most = 0;
  for (int r = 0; r < view.num_ranks(); ++r)
    for (const StackedSample& s : view.memory(r))
      most = std::max(most, s.cumulative[kModelStateCategories - 1]);
  return most;
}

namespace {

// One view's memory strips: where they are drawn and on which vertical scale.
struct MemoryStrips {
  const PanelContext& ctx;
  const TraceView& view;
  ImDrawList* dl;
  float x_left, x_right;
  float strip;       // one rank's strip height, pixels
  double scale_max;  // bytes at the top of a strip
  int categories;    // how many of the stacked categories are drawn
  bool capacity_on_scale;
  float px(double t) const { return static_cast<float>(ctx.axis.to_px(t)); }
  // Pixel y of `bytes` in the strip whose bottom is y1.
  float py(double bytes, float y1) const {
    return static_cast<float>(y1 - bytes / scale_max * strip);
  }
};

// Stacked areas: each span holds its sample's cumulative sums until the next sample. Heights are
// snapped to whole pixels and a category's rectangle is extended while its top and bottom stay
// the same, so a long run draws a few hundred rectangles, not one per sample and pixel.
void draw_stacked_areas(const MemoryStrips& m, int r, float y1) {
  struct Pending {
    float x0 = 0, x1 = 0, top = 0, bottom = 0;
    bool open = false;
  };
  std::array<Pending, 6> pending{};
  auto flush = [&](int c) {
    Pending& p = pending[c];
    if (p.open && p.bottom > p.top)
      m.dl->AddRectFilled({p.x0, p.top}, {p.x1, p.bottom}, m.ctx.pal.memory[c]);
    p.open = false;
  };
  const auto& samples = m.view.memory(r);
  for (const MemorySpan& span : m.view.visible_memory(r, m.ctx.axis)) {
    const StackedSample& s = samples[span.sample];
    const float a = m.px(span.start), b = std::max(m.px(span.end), a + 1);
    int64_t below = 0;
    for (int c = 0; c < m.categories; ++c) {
      const float top = std::round(m.py(s.cumulative[c], y1)), bottom = std::round(m.py(below, y1));
      below = s.cumulative[c];
      Pending& p = pending[c];
      if (p.open && p.top == top && p.bottom == bottom && a <= p.x1 + 0.5f) {
        p.x1 = std::max(p.x1, b);
        continue;
      }
      flush(c);
      p = {a, b, top, bottom, true};
    }
  }
  for (int c = 0; c < m.categories; ++c) flush(c);
}

// Peak: a marker on the stack and its value at the right end of the strip (or, for model
// states only, what the strip shows).
void draw_peak(const MemoryStrips& m, int r, float y0, float y1, bool model_states_only) {
  const Palette& pal = m.ctx.pal;
  const RankSummary& sum = m.view.summary(r);
  if (model_states_only) {
    const std::string text = "model states only (parameters, gradients, optimizer state)";
    m.dl->AddText({m.x_right - ImGui::CalcTextSize(text.c_str()).x - 4, y0 + 1}, pal.ruler_text,
                  text.c_str());
    return;
  }
  if (sum.peak_bytes <= 0) return;
  const float xp = m.px(sum.peak_time), yp = m.py(static_cast<double>(sum.peak_bytes), y1);
  if (xp >= m.x_left && xp <= m.x_right) {
    const float k = 4 * m.ctx.scale;
    m.dl->AddTriangleFilled({xp - k, yp - 2 * k}, {xp + k, yp - 2 * k}, {xp, yp}, pal.peak);
  }
  const auto& capacity = m.view.memory_capacity();
  // The longest wording that fits the strip: a narrow column keeps "peak 6.43 MiB".
  const std::string peak = "peak " + format_bytes(static_cast<double>(sum.peak_bytes));
  std::vector<std::string> wordings;
  if (capacity) {
    const std::string of = (m.capacity_on_scale ? " / " : " of ") + format_bytes(*capacity);
    if (!m.capacity_on_scale) wordings.push_back(peak + of + " capacity (off scale)");
    wordings.push_back(peak + of);
  }
  wordings.push_back(peak);
  const std::string text = longest_fitting(wordings, m.x_right - m.x_left - 8, imgui_measure());
  if (text.empty()) return;
  const ImVec2 size = ImGui::CalcTextSize(text.c_str());
  const ImVec2 at{m.x_right - size.x - 4, y0 + 1};
  m.dl->AddRectFilled({at.x - 2, at.y}, {at.x + size.x + 2, at.y + size.y}, pal.lane_background);
  draw_text(m.ctx, m.dl, at, pal.ruler_text, text);
}

}  // namespace

void draw_memory(const PanelContext& ctx, const TraceView& view, float strip_height,
                 int64_t max_bytes, bool model_states_only) {
  const TimeAxis& axis = ctx.axis;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float strip =
      ctx.strip_height > 0 ? ctx.strip_height : std::round(strip_height * ctx.scale);
  const float gap = std::round(6 * ctx.scale);

  // The capacity sets the scale only when it is within reach of the peak: a 4 MiB tiny model on
  // an 80 GiB GPU would otherwise be a flat line. Off-scale capacities are named in the label.
  double scale_max = static_cast<double>(max_bytes > 0       ? max_bytes
                                         : model_states_only ? max_model_states(view)
                                                             : view.max_memory());
  const bool capacity_on_scale = !model_states_only && view.memory_capacity() &&
                                 *view.memory_capacity() <= 4 * std::max(scale_max, 1.0);
  if (capacity_on_scale) scale_max = std::max(scale_max, *view.memory_capacity());
  if (scale_max <= 0) {
    ImGui::TextDisabled("(no memory samples in this trace)");
    return;
  }
  scale_max *= 1.08;  // headroom for the peak label
  const MemoryStrips m{ctx,
                       view,
                       ImGui::GetWindowDrawList(),
                       static_cast<float>(axis.x0),
                       static_cast<float>(axis.x0 + axis.width),
                       strip,
                       scale_max,
                       model_states_only ? kModelStateCategories : 6,
                       capacity_on_scale};

  for (int r = 0; r < view.num_ranks(); ++r) {
    const float y0 = origin.y + r * (strip + gap), y1 = y0 + strip;
    const std::string label = view.rank_label(r);
    const ImVec2 at{origin.x + 6 * ctx.scale, y0 + (strip - ImGui::GetTextLineHeight()) / 2};
    draw_text(ctx, m.dl, at, ctx.pal.ruler_text, label);
    m.dl->AddRectFilled({m.x_left, y0}, {m.x_right, y1}, ctx.pal.lane_background);
    m.dl->PushClipRect({m.x_left, y0}, {m.x_right, y1}, true);
    draw_stacked_areas(m, r, y1);
    if (capacity_on_scale) {
      const float yc = m.py(*view.memory_capacity(), y1);
      m.dl->AddLine({m.x_left, yc}, {m.x_right, yc}, ctx.pal.capacity, 2 * ctx.scale);
    }
    m.dl->PopClipRect();
    draw_peak(m, r, y0, y1, model_states_only);
  }
  ImGui::Dummy({1, view.num_ranks() * (strip + gap)});
}

}  // namespace mgpu::viz
