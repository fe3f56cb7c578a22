// Internal to viz/: what the dashboard's files share about sizes and layout.
#pragma once
#include <imgui.h>

namespace mgpu::viz {

inline constexpr float kPresentationScale = 1.6f;  // presentation mode: everything this much larger

inline float ui_scale(bool presentation) {
  return presentation ? kPresentationScale : 1.0f;
}

// Continues the row when an item `width` pixels wide still fits after `spacing`; false (and the
// cursor stays on a new row) when it does not.
bool fits_on_this_row(float width, float spacing);

}  // namespace mgpu::viz
