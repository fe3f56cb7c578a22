// Classroom mode: a lesson's parameters as controls over the timelines; changing one re-runs the
// lesson in-process (the RerunHook callback) and its trace replaces the view(s).
#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "viz/dashboard.h"
#include "viz/ui.h"

namespace mgpu::viz {

void Dashboard::draw_classroom_controls() {
  if (!options_.rerun || !options_.rerun->params.is_array()) return;
  const bool waiting = pending_ != nullptr;  // a re-run on another thread: no new one meanwhile
  if (waiting) ImGui::BeginDisabled();
  bool changed = false;
  const nlohmann::json before = options_.rerun->params;
  const float width = 160 * ui_scale(options_.presentation);
  bool first = true;
  for (auto& spec : options_.rerun->params) {
    const std::string name = spec.value("name", std::string("?"));
    const std::string type = spec.value("type", std::string("int"));
    if (name == options_.rerun->split_by) continue;  // one run per value, side by side
    // Controls wrap onto a second row rather than run off the right edge.
    const float item_w =
        width + ImGui::GetStyle().ItemInnerSpacing.x + ImGui::CalcTextSize(name.c_str()).x;
    if (!first) fits_on_this_row(item_w, 20);
    first = false;
    ImGui::SetNextItemWidth(width);
    if (type == "choice" && spec.contains("choices") && spec["choices"].is_array()) {
      const auto& choices = spec["choices"];
      const std::string current = spec.value("value", std::string());
      if (ImGui::BeginCombo(name.c_str(), current.c_str())) {
        for (const auto& c : choices) {
          const std::string s = c.is_string() ? c.get<std::string>() : c.dump();
          if (ImGui::Selectable(s.c_str(), s == current) && s != current) {
            spec["value"] = s;
            changed = true;
          }
        }
        ImGui::EndCombo();
      }
    } else {
      // The value the shown runs used (DualPipe's own 2 virtual stages), not only the one asked.
      const int asked = spec.value("value", 0);
      const nlohmann::json shown = shown_parameter(name);
      int v = shown.is_number_integer() ? shown.get<int>() : asked;
      if (ImGui::SliderInt(name.c_str(), &v, spec.value("min", 0), spec.value("max", 100)) &&
          v != asked) {
        spec["value"] = v;
        changed = true;
      }
    }
  }
  if (waiting) ImGui::EndDisabled();
  const char* idle_hint =
      waiting ? "(re-running the lesson...)" : "(classroom: change a value to re-run)";
  if (!rerun_error_.empty()) {
    ImGui::NewLine();
    ImGui::TextColored({1, 0.3f, 0.3f, 1}, "%s", rerun_error_.c_str());
  } else if (fits_on_this_row(ImGui::CalcTextSize(idle_hint).x, 20)) {
    ImGui::TextDisabled("%s", idle_hint);
  }
  if (changed) rerun_with_current_params(before);
}

nlohmann::json Dashboard::shown_parameter(const std::string& name) const {
  if (!options_.rerun) return nullptr;
  nlohmann::json asked = nullptr;
  for (const auto& spec : options_.rerun->params)
    if (spec.value("name", std::string()) == name) asked = spec.value("value", nlohmann::json());
  if (asked.is_null()) return nullptr;
  // The re-run views are the first ones (one, or one per split value): what their runs used.
  const size_t runs = options_.rerun->split_by.empty() ? 1 : options_.rerun->split_values.size();
  nlohmann::json used = nullptr;
  for (size_t v = 0; v < std::min(runs, views_.size()); ++v) {
    const auto& md = views_[v].trace().metadata;
    if (!md.is_object() || !md.contains("config") || !md["config"].is_object() ||
        !md["config"].contains(name))
      return asked;
    const nlohmann::json& value = md["config"][name];
    if (!used.is_null() && used != value) return asked;  // the runs differ: the slider's own
    used = value;
  }
  return used.is_null() || used.type() != asked.type() ? asked : used;
}

bool Dashboard::set_parameter(const std::string& name, const nlohmann::json& value) {
  if (!options_.rerun) return false;
  for (auto& spec : options_.rerun->params) {
    if (spec.value("name", std::string()) == name) {
      const nlohmann::json before = options_.rerun->params;
      spec["value"] = value;
      rerun_with_current_params(before);
      return rerun_error_.empty();
    }
  }
  return false;
}

// The runs one change asks for (one, or one per split value), their labels, or the error line.
struct Dashboard::PendingRerun {
  std::vector<TraceView> runs;
  std::vector<std::string> labels;
  std::string error;
  nlohmann::json previous_params;  // what the controls go back to on an error
  std::function<bool()> finished;  // RerunHook::start's answer
};

namespace {
void make_runs(const RerunHook& hook, nlohmann::json values, Dashboard::PendingRerun& out,
               const std::vector<std::string>& labels) {
  try {
    if (hook.split_by.empty()) {
      out.runs.emplace_back(hook.run(values));
      out.labels = labels;
    }
    for (const std::string& value :
         hook.split_by.empty() ? std::vector<std::string>{} : hook.split_values) {
      values[hook.split_by] = value;
      out.runs.emplace_back(hook.run(values));
      out.labels.push_back(hook.split_by + " " + value);
    }
  } catch (const std::exception& e) {
    out.error = std::string("re-run failed: ") + e.what();
  }
}
}  // namespace

void Dashboard::rerun_with_current_params(const nlohmann::json& previous_params) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& spec : options_.rerun->params) {
    if (spec.contains("name") && spec.contains("value"))
      values[spec["name"].get<std::string>()] = spec["value"];
  }
  auto pending = std::make_shared<PendingRerun>();
  pending->previous_params = previous_params;
  auto work = [hook = *options_.rerun, values, labels = options_.labels, pending] {
    make_runs(hook, values, *pending, labels);
  };
  if (options_.rerun->start) {  // on another thread: shown by the frame after it finishes
    pending->finished = options_.rerun->start(std::move(work));
    pending_ = std::move(pending);
    return;
  }
  work();
  show_rerun(*pending);
}

void Dashboard::show_rerun_if_finished() {
  if (!pending_ || !pending_->finished()) return;
  const std::shared_ptr<PendingRerun> done = std::move(pending_);
  show_rerun(*done);
}

void Dashboard::show_rerun(PendingRerun& done) {
  if (!done.error.empty()) {
    rerun_error_ = done.error;
    options_.rerun->params = done.previous_params;  // the controls show what is on screen
    return;
  }
  // Views past the re-run ones (a compare's other traces) stay.
  for (size_t v = done.runs.size(); v < views_.size(); ++v)
    done.runs.push_back(std::move(views_[v]));
  views_ = std::move(done.runs);
  options_.labels = std::move(done.labels);
  layouts_.resize(views_.size());
  rerun_error_.clear();
  select(-1, -1);
  if (!highlight(highlight_)) highlight("");  // the new run may not have that group
  fit();
}

}  // namespace mgpu::viz
