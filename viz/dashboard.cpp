// The dashboard frame: the header, classroom controls (classroom.cpp), then per view a ruler, the
// timeline and the memory strips on one shared time axis, and the summaries. Showing it in a
// window or a PNG is window.cpp; the command line is viz_main.cpp.
#include "viz/dashboard.h"

#include <algorithm>
#include <cfloat>
#include <set>

#include <imgui.h>
#include <imgui_internal.h>  // SetItemUsingMouseWheel

#include "core/trace/analysis.h"
#include "viz/panels.h"
#include "viz/ui.h"

namespace mgpu::viz {

namespace {
constexpr float kMemoryStripHeight = 40.0f;     // per rank: the peak label and 6 bands fit
constexpr float kCompareStripHeight = 56.0f;    // compared runs: every band a few pixels at least
constexpr float kProjectorStripHeight = 28.0f;  // presentation, runs side by side
}  // namespace

bool fits_on_this_row(float width, float spacing) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  ImGui::SameLine(0, spacing);
  if (ImGui::GetCursorScreenPos().x + width <= right) return true;
  ImGui::NewLine();
  return false;
}

Dashboard::Dashboard(DashboardOptions options) : options_(std::move(options)) {
  for (trace::Trace& t : options_.traces) views_.emplace_back(std::move(t));
  options_.traces.clear();  // the views own the traces now
  layouts_.resize(views_.size());
  if (views_.empty() && options_.rerun) rerun_with_current_params(options_.rerun->params);
  highlight(options_.highlight);
}

std::vector<std::string> Dashboard::comm_groups() const {
  std::set<std::string> all;
  for (const TraceView& v : views_) all.insert(v.comm_groups().begin(), v.comm_groups().end());
  return {all.begin(), all.end()};
}

bool Dashboard::highlight(const std::string& group) {
  const std::vector<std::string> groups = comm_groups();
  if (!group.empty() && !std::binary_search(groups.begin(), groups.end(), group)) return false;
  highlight_ = group;
  return true;
}

void Dashboard::select(int view, int event) {
  selected_view_ = view;
  selected_event_ = event;
  partners_ = (view >= 0 && event >= 0) ? views_[view].partners(event) : std::vector<int>{};
}

void Dashboard::draw_header() {
  ImGui::TextUnformatted(options_.title.c_str());
  ImGui::SameLine(0, 24);
  if (ImGui::Button("Fit")) fit();
  ImGui::SameLine();
  if (ImGui::Button("Last step")) fit_last_step();
  ImGui::SameLine();
  bool presentation = options_.presentation;
  if (ImGui::Checkbox("Presentation", &presentation)) {
    options_.presentation = presentation;
    setup_imgui(presentation);
  }
  draw_group_control();
  ImGui::SameLine(0, 24);
  ImGui::Checkbox("model states only", &options_.model_states_only);
  // The hint only where the row has room for it (presentation fonts would push it off the edge).
  const char* hint = "wheel: zoom   drag: pan   click: select (partners highlighted)";
  if (fits_on_this_row(ImGui::CalcTextSize(hint).x, 24)) ImGui::TextDisabled("%s", hint);
}

// A combo box of the traces' communication groups: the one picked is highlighted.
void Dashboard::draw_group_control() {
  const std::vector<std::string> groups = comm_groups();
  if (groups.empty()) return;
  ImGui::SameLine(0, 24);
  ImGui::SetNextItemWidth(80 * ui_scale(options_.presentation));
  if (ImGui::BeginCombo("highlight", highlight_.empty() ? "(none)" : highlight_.c_str())) {
    if (ImGui::Selectable("(none)", highlight_.empty())) highlight("");
    for (const std::string& g : groups)
      if (ImGui::Selectable(g.c_str(), g == highlight_)) highlight(g);
    ImGui::EndCombo();
  }
}

TimeAxis Dashboard::axis(int view) const {
  TimeAxis a = axis_;
  if (view < 0 || view >= static_cast<int>(view_origin_.size())) return a;
  if (view < static_cast<int>(view_x0_.size())) a.x0 = view_x0_[view];  // its column
  const double shift = view_origin_[view] - axis_.origin;
  a.t0 += shift;
  a.t1 += shift;
  a.origin = view_origin_[view];
  return a;
}

void Dashboard::frame(float display_w, float display_h) {
  const bool presentation = options_.presentation;
  const float scale = ui_scale(presentation);
  ImGuiIO& io = ImGui::GetIO();
  const bool big_font = presentation && io.Fonts->Fonts.Size > 1;
  if (big_font) ImGui::PushFont(io.Fonts->Fonts[1]);

  ImGui::SetNextWindowPos({0, 0});
  ImGui::SetNextWindowSize({display_w, display_h});
  ImGui::Begin("##mgpu-dashboard", nullptr,
               ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  draw_header();
  // The label column fits the widest row label ("GPU 5  dp1 pp0 tp1" on a mesh).
  float label_width = ImGui::CalcTextSize("GPU 00").x;
  for (const TraceView& v : views_)
    for (int r = 0; r < v.num_ranks(); ++r)
      label_width = std::max(label_width, ImGui::CalcTextSize(v.rank_label(r).c_str()).x);
  label_width += 16 * scale;
  PanelContext ctx{palette(presentation), axis_, label_width, scale};
  draw_legend(ctx, std::any_of(views_.begin(), views_.end(),
                               [](const TraceView& v) { return v.is_pipeline(); }));
  draw_classroom_controls();
  if (!options_.error.empty()) {
    ImGui::Spacing();
    ImGui::TextColored({1, 0.3f, 0.3f, 1}, "%s", options_.error.c_str());
  }
  if (views_.empty()) {
    if (options_.error.empty()) ImGui::TextDisabled("(no trace)");
  } else {
    draw_views(ctx);
    content_height_ = ImGui::GetCursorPosY() + ImGui::GetStyle().WindowPadding.y;
  }
  ImGui::End();
  if (big_font) ImGui::PopFont();
}

void Dashboard::draw_views(const PanelContext& ctx) {
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
  if (columns) {
    ImGui::Separator();
    draw_memory_legend(ctx);
  }
  const float top = ImGui::GetCursorScreenPos().y;
  float bottom = top;
  for (size_t v = 0; v < views_.size(); ++v) {
    if (columns) ImGui::SetCursorScreenPos({view_x0_[v] - label_width, top});
    ImGui::BeginGroup();
    draw_view(static_cast<int>(v), label_width, columns ? column_w : 0);
    if (columns) {
      PanelContext column_ctx = ctx;
      column_ctx.column_width = column_w;
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
  for (size_t v = 0; v < views_.size(); ++v) {
    if (v % 2 == 1) ImGui::SameLine(0, 40 * scale);  // two summaries a row
    ImGui::BeginGroup();
    draw_view_summary(static_cast<int>(v), ctx);
    ImGui::EndGroup();
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

void Dashboard::draw_view(int v, float label_width, float column_w) {
  const float scale = ui_scale(options_.presentation);
  const Palette& pal = palette(options_.presentation);
  ImGui::Separator();
  if (views_.size() > 1 || v < static_cast<int>(options_.labels.size())) {
    ImGui::TextUnformatted(v < static_cast<int>(options_.labels.size()) ? options_.labels[v].c_str()
                                                                        : "trace");
    ImGui::SameLine(0, 16 * scale);
  }
  // The run's line, when it fits its column (a column's label already names what differs).
  const std::string run = describe_run(views_[v]);
  if (column_w <= 0 || ImGui::GetCursorScreenPos().x + ImGui::CalcTextSize(run.c_str()).x <=
                           view_x0_[v] - label_width + column_w)
    ImGui::TextDisabled("%s", run.c_str());
  else
    ImGui::NewLine();
  // This view's axis; a zoom or pan on it is carried back to the shared one.
  TimeAxis view_axis = axis(v);
  PanelContext view_ctx{pal, view_axis, label_width, scale};
  draw_ruler(view_ctx);
  Selection sel{selected_view_, selected_event_, &partners_, highlight_};
  const int c = draw_timeline(view_ctx, views_[v], v, sel, layouts_[v]);
  ImGui::SetItemUsingMouseWheel();  // the wheel zooms the timeline instead of scrolling
  if (c != -2) select(c >= 0 ? v : -1, c);
  if (column_w <= 0) draw_memory_legend(view_ctx);  // columns: one legend above them
  // One memory scale for every view, so compared runs' strips compare by height; compared runs
  // get taller strips so the smaller run's bands (ZeRO-3's quarter states) stay visible.
  const bool states = options_.model_states_only;
  int64_t shared_memory_max = 0;
  for (const TraceView& w : views_)
    shared_memory_max = std::max(shared_memory_max, states ? max_model_states(w) : w.max_memory());
  // A projector shows two runs side by side at 1920x1080: lower strips there (the peak label fits).
  const float strip = options_.presentation && column_w > 0 ? kProjectorStripHeight
                      : views_.size() > 1                   ? kCompareStripHeight
                                                            : kMemoryStripHeight;
  draw_memory(view_ctx, views_[v], strip, shared_memory_max, states);
  const double shift = view_axis.origin - axis_.origin;
  axis_.t0 = view_axis.t0 - shift;
  axis_.t1 = view_axis.t1 - shift;
}

void Dashboard::draw_view_summary(int v, const PanelContext& ctx) {
  if (views_.size() > 1) {
    ImGui::TextUnformatted(v < static_cast<int>(options_.labels.size()) ? options_.labels[v].c_str()
                                                                        : "trace");
  }
  draw_summary(ctx, views_[v], "summary" + std::to_string(v));
}

}  // namespace mgpu::viz
