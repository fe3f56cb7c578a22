// Internal to viz/: the palette and the panels the dashboard is made of. Each panel draws with
// ImDrawList at the current ImGui cursor and reserves the space it used.
#pragma once
#include <array>
#include <string>
#include <vector>

#include <imgui.h>

#include "viz/layout.h"
#include "viz/view_model.h"

namespace mgpu::viz {

struct Palette {
  ImU32 forward, backward, backward_weight, optimizer, compute, comm;
  ImU32 comm_wait;  // a comm event's waiting for a partner: hatched in `comm` over this
  ImU32 idle, idle_hatch, idle_text;
  ImU32 cell_text, cell_border;
  ImU32 lane_background, ruler_text, ruler_line;
  ImU32 selected, partner;
  ImU32 capacity, peak;
  std::array<ImU32, 6> memory;  // MemCategory order
};
// `colour` faded most of the way into `background` (what a highlight dims).
ImU32 dimmed(ImU32 colour, ImU32 background);

// How a hatched area looks: a fill, lines over it and their slant. The timeline and the legend
// draw both kinds with these, so a legend swatch looks like what it names: a pipeline bubble
// (idle) is amber lines falling left to right, a comm event's waiting for a partner red lines
// rising, over different fills.
struct Hatch {
  ImU32 fill = 0, lines = 0;
  bool rising = true;  // "/" (true) or "\\"
  float spacing = 5;   // between the lines, unscaled pixels
};
Hatch bubble_hatch(const Palette& p);
Hatch comm_wait_hatch(const Palette& p);
// `a`, `b` must already be clamped to the visible lane (the line count is bounded by the width).
// The lines are h.spacing x `scale` apart.
void draw_hatched(ImDrawList* dl, ImVec2 a, ImVec2 b, const Hatch& h, float scale);

// Default: the ImGui dark theme. Presentation: a light theme with saturated, high-contrast colours.
const Palette& palette(bool presentation);
ImU32 category_colour(const Palette& p, const std::string& cat);

// Everything a panel needs to know about the frame.
struct PanelContext {
  const Palette& pal;
  TimeAxis& axis;          // shared by every view (compare mode); panels may zoom/pan it
  float label_width;       // left column with "GPU r"
  float scale;             // 1, or larger in presentation mode
  float column_width = 0;  // compared runs side by side: each one's width (0: the window's)
  float lane_height = 0;   // a lane's height when rows are shrunk to fit (0: the natural one)
  float strip_height = 0;  // a memory strip's height, scaled (0: draw_memory's argument)
  int rows_per_block = 0;  // summary: ranks per side-by-side block (0: one block)
  int view = -1;           // the compared run being drawn (text boxes are tagged with it)
  std::vector<TextBox>* texts = nullptr;  // where drawn text is recorded (tests check overprint)
};

// Records a drawn text's rectangle (nothing when ctx.texts is null).
void note_text(const PanelContext& ctx, ImVec2 a, ImVec2 b, const std::string& text);
// Draws `text` at `at` and records its rectangle; returns its size.
ImVec2 draw_text(const PanelContext& ctx, ImDrawList* dl, ImVec2 at, ImU32 colour,
                 const std::string& text);
// The same for the last ImGui item (a line of text, a table).
void note_item(const PanelContext& ctx, const std::string& text);
// The width available to a panel: its column's, else what is left of the window's row.
float panel_width(const PanelContext& ctx);
MeasureText imgui_measure();

struct Selection {
  int view = -1;
  int event = -1;
  const std::vector<int>* partners = nullptr;
  // A highlighted communication group ("tp1"), or empty: its events drawn outlined over every
  // other event dimmed, and its members' row labels marked.
  std::string highlight;
};

// Time ruler along the top of a timeline. Returns its height.
float draw_ruler(const PanelContext& ctx);

// One view's lane groups. Handles wheel zoom, drag pan, hover tooltip; returns the event clicked,
// -1 for a click on empty space, -2 when nothing was clicked. `layout` receives where the lanes
// were drawn (window pixels).
int draw_timeline(const PanelContext& ctx, const TraceView& view, int view_index,
                  const Selection& selection, LaneLayout& layout);

// Stacked memory by category per rank, aligned to the same time axis; `strip_height` pixels
// per rank (before scaling). `max_bytes` sets the vertical scale (the largest total over the
// views shown, so compared runs share it); 0: this view's own largest total.
// `model_states_only`: only parameters, gradients and optimizer state, on their own scale (the
// largest of them over `max_bytes`'s views), so small sharded states (ZeRO) are tall enough to see.
void draw_memory(const PanelContext& ctx, const TraceView& view, float strip_height,
                 int64_t max_bytes = 0, bool model_states_only = false);
// The largest parameters + gradients + optimizer state of a view (over its ranks and samples).
int64_t max_model_states(const TraceView& view);

// Per-rank table: busy, comm wire, comm wait, idle, bubble %, overlap %, peak memory (+ theory
// where known).
void draw_summary(const PanelContext& ctx, const TraceView& view, const std::string& id);

// A mixture-of-experts run's routing in the summarised step, one heat map per MoE block: a row
// per GPU (and their sum), a column per expert, each cell its kept tokens, shaded by the block's
// busiest expert; with the router's imbalance (max/mean). Nothing for a dense model.
void draw_expert_load(const PanelContext& ctx, const TraceView& view);

// Per-rank bars for the summarised step (or run): busy and idle share of the compute lane, the
// comm lane's share under it (wire solid, waiting lighter), and measured vs theory (metadata
// "predictions") as bars. Called by draw_summary under its table.
void draw_time_bars(const PanelContext& ctx, const TraceView& view);

// Colour keys: event categories and idle; memory categories and the capacity line.
void draw_legend(const PanelContext& ctx, bool any_pipeline);  // "idle (bubble)" or "idle"
void draw_memory_legend(const PanelContext& ctx);

}  // namespace mgpu::viz
