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

void draw_memory(const PanelContext& ctx, const TraceView& view, float strip_height,
                 int64_t max_bytes, bool model_states_only) {
  const int categories = model_states_only ? kModelStateCategories : 6;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const Palette& pal = ctx.pal;
  const TimeAxis& axis = ctx.axis;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float strip = std::round(strip_height * ctx.scale), gap = std::round(6 * ctx.scale);
  const float x_left = static_cast<float>(axis.x0),
              x_right = static_cast<float>(axis.x0 + axis.width);
  auto px = [&](double t) { return static_cast<float>(axis.to_px(t)); };

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

  for (int r = 0; r < view.num_ranks(); ++r) {
    const float y0 = origin.y + r * (strip + gap), y1 = y0 + strip;
    auto py = [&](double bytes) { return static_cast<float>(y1 - bytes / scale_max * strip); };
    dl->AddText({origin.x + 6 * ctx.scale, y0 + (strip - ImGui::GetTextLineHeight()) / 2},
                pal.ruler_text, view.rank_label(r).c_str());
    dl->AddRectFilled({x_left, y0}, {x_right, y1}, pal.lane_background);
    dl->PushClipRect({x_left, y0}, {x_right, y1}, true);

    // Stacked areas: each span holds its sample's cumulative sums until the next sample. Heights
    // are snapped to whole pixels and a category's rectangle is extended while its top and bottom
    // stay the same, so a long run draws a few hundred rectangles, not one per sample and pixel.
    struct Pending {
      float x0 = 0, x1 = 0, top = 0, bottom = 0;
      bool open = false;
    };
    std::array<Pending, 6> pending{};
    auto flush = [&](int c) {
      Pending& p = pending[c];
      if (p.open && p.bottom > p.top)
        dl->AddRectFilled({p.x0, p.top}, {p.x1, p.bottom}, pal.memory[c]);
      p.open = false;
    };
    const auto& samples = view.memory(r);
    for (const MemorySpan& span : view.visible_memory(r, axis)) {
      const StackedSample& s = samples[span.sample];
      const float a = px(span.start), b = std::max(px(span.end), a + 1);
      int64_t below = 0;
      for (int c = 0; c < categories; ++c) {
        const float top = std::round(py(s.cumulative[c])), bottom = std::round(py(below));
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
    for (int c = 0; c < categories; ++c) flush(c);
    if (capacity_on_scale) {
      const float yc = py(*view.memory_capacity());
      dl->AddLine({x_left, yc}, {x_right, yc}, pal.capacity, 2 * ctx.scale);
    }
    dl->PopClipRect();

    // Peak: a marker on the stack and its value at the right end of the strip.
    const RankSummary& sum = view.summary(r);
    if (model_states_only) {
      const std::string text = "model states only (parameters, gradients, optimizer state)";
      dl->AddText({x_right - ImGui::CalcTextSize(text.c_str()).x - 4, y0 + 1}, pal.ruler_text,
                  text.c_str());
    } else if (sum.peak_bytes > 0) {
      const float xp = px(sum.peak_time), yp = py(static_cast<double>(sum.peak_bytes));
      if (xp >= x_left && xp <= x_right) {
        const float m = 4 * ctx.scale;
        dl->AddTriangleFilled({xp - m, yp - 2 * m}, {xp + m, yp - 2 * m}, {xp, yp}, pal.peak);
      }
      std::string text = "peak " + format_bytes(static_cast<double>(sum.peak_bytes));
      if (view.memory_capacity())
        text += (capacity_on_scale ? " / " : " of ") + format_bytes(*view.memory_capacity()) +
                (capacity_on_scale ? "" : " capacity (off scale)");
      const ImVec2 size = ImGui::CalcTextSize(text.c_str());
      const ImVec2 at{x_right - size.x - 4, y0 + 1};
      dl->AddRectFilled({at.x - 2, at.y}, {at.x + size.x + 2, at.y + size.y}, pal.lane_background);
      dl->AddText(at, pal.ruler_text, text.c_str());
    }
  }
  ImGui::Dummy({1, view.num_ranks() * (strip + gap)});
}

}  // namespace mgpu::viz
