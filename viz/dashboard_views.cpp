// The dashboard's views: per view a ruler, the timeline and the memory strips on one shared time
// axis, then the summaries; side by side (columns) or stacked (rows). Rows shrink to fit the
// room (DashboardOptions::fit_height): the memory strips go first when even the smallest rows do
// not fit, and past that the page scrolls.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include <imgui.h>
#include <imgui_internal.h>  // SetItemUsingMouseWheel

#include "core/trace/analysis.h"
#include "viz/dashboard.h"
#include "viz/panels.h"
#include "viz/ui.h"

namespace mgpu::viz {

namespace {
constexpr float kMemoryStripHeight = 40.0f;     // per rank: the peak label and 6 bands fit
constexpr float kCompareStripHeight = 56.0f;    // compared runs: every band a few pixels at least
constexpr float kProjectorStripHeight = 28.0f;  // presentation, runs side by side
constexpr int kSummaryBlockRows = 8;            // more ranks: the table splits into blocks
}  // namespace

void Dashboard::plan_rows(const PanelContext& ctx, bool columns) {
  const float scale = ctx.scale, line = ImGui::GetTextLineHeight();
  int ranks = 0;
  for (const TraceView& v : views_)
    ranks = columns ? std::max(ranks, v.num_ranks()) : ranks + v.num_ranks();
  const float strip_base = options_.presentation && columns ? kProjectorStripHeight
                           : views_.size() > 1              ? kCompareStripHeight
                                                            : kMemoryStripHeight;
  const float lane_gap = std::round(2 * scale);
  RowSizes natural{std::round(line + 8 * scale),
                   options_.show_memory ? std::round(strip_base * scale) : 0};
  // A GPU row stays as tall as its label; a memory strip too.
  const RowSizes minimum{std::max(std::ceil((line - lane_gap) / 2), 5.0f), std::ceil(line)};
  float room = 0;  // what the rows may take: the height asked for less the rest, last frame's
  if (options_.fit_height > 0 && content_height_ > 0)
    room = std::max(1.0f, options_.fit_height - (content_height_ - rows_height_));
  const float row_extra = lane_gap + std::round(8 * scale), strip_extra = std::round(6 * scale);
  // Shrunk rows keep a smaller gap between GPUs (draw_timeline): size them with it.
  const float shrunk_extra = lane_gap + std::round(4 * scale);
  auto fit = [&](RowSizes n) {
    const RowSizes s = fit_rows(ranks, room, n, minimum, row_extra, strip_extra);
    return s.lane < n.lane ? fit_rows(ranks, room, n, minimum, shrunk_extra, strip_extra) : s;
  };
  RowSizes s = fit(natural);
  memory_hidden_to_fit_ = !s.fits && natural.strip > 0;
  if (memory_hidden_to_fit_) {
    natural.strip = 0;
    s = fit(natural);
  }
  rows_shrunk_ = s.lane < natural.lane;
  lane_height_ = s.lane;
  strip_height_ = s.strip;
}

void Dashboard::draw_views(const PanelContext& base) {
  PanelContext ctx = base;
  const float scale = ctx.scale, label_width = ctx.label_width;
  const float content_x = ImGui::GetCursorScreenPos().x;
  const float right_margin = 8 * scale + ImGui::GetStyle().ScrollbarSize;
  const float content_w = ImGui::GetContentRegionAvail().x - right_margin;
  const bool columns = views_.size() > 1 && options_.layout == CompareLayout::columns;
  // Side by side, each run gets a column; in rows, every run spans the width right of the labels.
  const float column_gap = 24 * scale;
  const float column_w =
      columns ? (content_w - column_gap * (views_.size() - 1)) / views_.size() : content_w;
  view_x0_.assign(views_.size(), content_x + label_width);
  for (size_t v = 0; columns && v < views_.size(); ++v)
    view_x0_[v] = content_x + v * (column_w + column_gap) + label_width;
  axis_.x0 = view_x0_[0];
  axis_.width = std::max(50.0f, column_w - label_width);
  fit_axis_if_pending();
  plan_rows(ctx, columns);
  ctx.lane_height = rows_shrunk_ ? lane_height_ : 0;
  ctx.strip_height = strip_height_;
  if (columns) {
    ImGui::Separator();
    draw_memory_note(ctx);
  }
  const float top = ImGui::GetCursorScreenPos().y;
  float bottom = top;
  rows_height_ = 0;
  for (size_t v = 0; v < views_.size(); ++v) {
    if (columns) ImGui::SetCursorScreenPos({view_x0_[v] - label_width, top});
    ImGui::BeginGroup();
    const float rows = draw_view(static_cast<int>(v), ctx, columns ? column_w : 0);
    rows_height_ = columns ? std::max(rows_height_, rows) : rows_height_ + rows;
    if (columns) {
      PanelContext column_ctx = ctx;
      column_ctx.column_width = column_w;
      column_ctx.view = static_cast<int>(v);
      draw_view_summary(static_cast<int>(v), column_ctx);
    }
    ImGui::EndGroup();
    bottom = std::max(bottom, ImGui::GetItemRectMax().y);
  }
  if (columns) {
    ImGui::SetCursorScreenPos({content_x, bottom});
    ImGui::Dummy({1, 1});
    return;
  }
  ImGui::Separator();
  // Stacked runs: two summaries a row, each half the width (its table keeps what fits).
  const float summary_gap = 40 * scale;
  for (size_t v = 0; v < views_.size(); ++v) {
    if (v % 2 == 1) ImGui::SameLine(0, summary_gap);
    PanelContext summary_ctx = ctx;
    summary_ctx.view = static_cast<int>(v);
    summary_ctx.column_width = views_.size() > 1 ? (content_w - summary_gap) / 2 : 0;
    ImGui::BeginGroup();
    draw_view_summary(static_cast<int>(v), summary_ctx);
    ImGui::EndGroup();
  }
}

// The memory legend, or why there are no strips: hidden by the user (nothing), or to fit.
void Dashboard::draw_memory_note(const PanelContext& ctx) {
  if (memory_hidden_to_fit_) {
    const char* note =
        "memory strips hidden so every GPU fits the height (a taller window or --height shows "
        "them)";
    ImGui::TextDisabled("%s", note);
    note_item(ctx, note);
  } else if (options_.show_memory) {
    draw_memory_legend(ctx);
  }
}

void Dashboard::fit_axis_if_pending() {
  if (!fit_pending_) return;
  // Each view's ruler reads 0 at the start of the step its summary describes (the last one of a
  // multi-step run), else at the start of its run; compare mode lines the views up there.
  view_origin_.clear();
  for (const TraceView& v : views_) view_origin_.push_back(v.shown_start());
  double start = DBL_MAX, end = -DBL_MAX;  // relative to each view's origin
  for (size_t v = 0; v < views_.size(); ++v) {
    double s = views_[v].run_start(), e = views_[v].run_end();
    // Steps are alike; one fills the width readably where twenty would be a blur.
    if (fit_last_step_pending_) {
      if (const auto step = views_[v].summary_step()) {
        const trace::Interval w = trace::analysis_window(views_[v].trace(), *step);
        s = w.begin;
        e = w.end;
      }
    }
    start = std::min(start, s - view_origin_[v]);
    end = std::max(end, e - view_origin_[v]);
  }
  // The left edge is the shown step's first event (no margin showing the previous step's tail);
  // a little room on the right for the last cell's border.
  const bool zoomed = options_.zoom && zoom_pending_;  // exactly the asked window, no margin
  if (zoomed) {
    start = options_.zoom->from;
    end = options_.zoom->to;
  }
  zoom_pending_ = false;
  axis_.fit(start + view_origin_[0], end + view_origin_[0], zoomed ? 0.0 : 0.01);
  axis_.t0 = start + view_origin_[0];
  axis_.origin = view_origin_[0];
  fit_pending_ = false;
  fit_last_step_pending_ = false;
}

float Dashboard::draw_view(int v, const PanelContext& base, float column_w) {
  ImGui::Separator();
  const float right = column_w > 0 ? view_x0_[v] - base.label_width + column_w : FLT_MAX;
  PanelContext label_ctx = base;
  label_ctx.view = v;
  if (views_.size() > 1 || v < static_cast<int>(options_.labels.size())) {
    const std::string label =
        v < static_cast<int>(options_.labels.size()) ? options_.labels[v] : "trace";
    ImGui::TextUnformatted(label.c_str());
    note_item(label_ctx, label);
    ImGui::SameLine(0, 16 * base.scale);
  }
  // The run's line, when it fits its column (a column's label already names what differs).
  const std::string run = describe_run(views_[v]);
  if (ImGui::GetCursorScreenPos().x + ImGui::CalcTextSize(run.c_str()).x <= right) {
    ImGui::TextDisabled("%s", run.c_str());
    note_item(label_ctx, run);
  } else {
    ImGui::NewLine();
  }
  // This view's axis; a zoom or pan on it is carried back to the shared one.
  TimeAxis view_axis = axis(v);
  PanelContext ctx = base;
  ctx.view = v;
  ctx.column_width = column_w;
  PanelContext view_ctx{ctx.pal,  view_axis,       ctx.label_width,  ctx.scale,
                        column_w, ctx.lane_height, ctx.strip_height, 0,
                        v,        ctx.texts};
  draw_ruler(view_ctx);
  const float rows_top = ImGui::GetCursorScreenPos().y;
  Selection sel{selected_view_, selected_event_, &partners_, highlight_};
  const int c = draw_timeline(view_ctx, views_[v], v, sel, layouts_[v]);
  ImGui::SetItemUsingMouseWheel();  // the wheel zooms the timeline instead of scrolling
  if (c != -2) select(c >= 0 ? v : -1, c);
  float rows = ImGui::GetCursorScreenPos().y - rows_top;
  if (column_w <= 0) draw_memory_note(view_ctx);  // columns: one legend above them
  if (strip_height_ > 0) {
    // One memory scale for every view, so compared runs' strips compare by height.
    const bool states = options_.model_states_only;
    int64_t shared_memory_max = 0;
    for (const TraceView& w : views_)
      shared_memory_max =
          std::max(shared_memory_max, states ? max_model_states(w) : w.max_memory());
    const float memory_top = ImGui::GetCursorScreenPos().y;
    draw_memory(view_ctx, views_[v], kMemoryStripHeight, shared_memory_max, states);
    rows += ImGui::GetCursorScreenPos().y - memory_top;
  }
  const double shift = view_axis.origin - axis_.origin;
  axis_.t0 = view_axis.t0 - shift;
  axis_.t1 = view_axis.t1 - shift;
  return rows;
}

void Dashboard::draw_view_summary(int v, const PanelContext& ctx) {
  if (views_.size() > 1) {
    const std::string label =
        v < static_cast<int>(options_.labels.size()) ? options_.labels[v] : "trace";
    ImGui::TextUnformatted(label.c_str());
    note_item(ctx, label);
  }
  PanelContext summary_ctx = ctx;
  summary_ctx.rows_per_block = kSummaryBlockRows;
  draw_summary(summary_ctx, views_[v], "summary" + std::to_string(v));
}

}  // namespace mgpu::viz
