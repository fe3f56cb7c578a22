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
  const float memory_w = ImGui::GetFrameHeight() + ImGui::CalcTextSize("memory").x + 8;
  fits_on_this_row(memory_w, 24);
  ImGui::Checkbox("memory", &options_.show_memory);  // the strips under the timelines
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
  show_rerun_if_finished();
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
  text_boxes_.clear();
  PanelContext ctx{palette(presentation), axis_, label_width, scale};
  ctx.texts = &text_boxes_;
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

}  // namespace mgpu::viz
