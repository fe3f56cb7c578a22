#include "lessons/classroom.h"

#include <algorithm>
#include <sstream>

#include "core/runtime/profile.h"
#include "lessons/pipeline.h"

#ifdef MGPU_HAVE_VIZ
#include "viz/dashboard.h"
#endif

namespace mgpu::lessons {

nlohmann::json classroom_parameters() {
  nlohmann::json profiles = HardwareProfile::preset_names();
  return nlohmann::json::array({
      {{"name", "schedule"},
       {"type", "choice"},
       {"choices", {"naive", "gpipe", "1f1b", "interleaved", "zb-h1"}},
       {"value", "1f1b"}},
      {{"name", "stages"}, {"type", "int"}, {"min", 1}, {"max", 8}, {"value", 4}},
      {{"name", "microbatches"}, {"type", "int"}, {"min", 1}, {"max", 32}, {"value", 8}},
      {{"name", "virtual_stages"}, {"type", "int"}, {"min", 1}, {"max", 4}, {"value", 1}},
      {{"name", "profile"}, {"type", "choice"}, {"choices", profiles}, {"value", "8xH100-NVLink"}},
  });
}

trace::Trace classroom_rerun(const nlohmann::json& params) {
  PipelineOptions p;
  p.schedule = params.value("schedule", std::string("1f1b"));
  p.stages = params.value("stages", 4);
  p.microbatches = params.value("microbatches", 8);
  p.virtual_stages = params.value("virtual_stages", 1);
  if (p.schedule == "naive") p.microbatches = 1;
  CommonOptions c;
  c.ranks = p.stages;
  c.profile = params.value("profile", std::string("8xH100-NVLink"));
  c.layers = std::max(8, p.stages * p.virtual_stages);
  c.dim = 64;
  c.heads = 4;
  c.seq = 32;
  c.batch = 2 * p.microbatches;
  c.steps = 1;
  c.quiet = true;
  std::ostringstream quiet;
  return train_pipeline(c, p, quiet).trace;  // invalid combinations throw: the dashboard says why
}

#ifdef MGPU_HAVE_VIZ
int run_classroom(bool presentation, const std::string& screenshot, int width, int height,
                  std::ostream& err) {
  (void)err;
  viz::DashboardOptions opt;
  opt.title = "mgpu-lab classroom - pipeline bubbles";
  opt.presentation = presentation;
  opt.rerun = viz::RerunHook{classroom_rerun, classroom_parameters()};
  nlohmann::json defaults;
  for (auto& spec : opt.rerun->params) defaults[spec["name"].get<std::string>()] = spec["value"];
  opt.traces = {classroom_rerun(defaults)};
  opt.labels = {"pipeline"};
  if (!screenshot.empty()) return viz::render_screenshot(opt, screenshot, width, height);
  return viz::run_dashboard(opt);
}
#else
int run_classroom(bool, const std::string&, int, int, std::ostream& err) {
  err << "mgpu viz: error: this build has no dashboard (install libimgui-dev libglfw3-dev "
         "libgl-dev and rebuild)\n";
  return 2;
}
#endif

}  // namespace mgpu::lessons
