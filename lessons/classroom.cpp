#include "lessons/classroom.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "core/runtime/output_file.h"
#include "core/runtime/profile.h"
#include "core/theory/schedule_kind.h"
#include "lessons/pipeline.h"

#ifdef MGPU_HAVE_VIZ
#include "viz/dashboard.h"
#endif

namespace mgpu::lessons {

namespace {
const std::string kDefaultSchedule = theory::schedule_name(theory::ScheduleKind::one_f_one_b);
constexpr int kDefaultBatch = 16;  // the lesson's --batch default
}  // namespace

nlohmann::json classroom_parameters() {
  nlohmann::json profiles = HardwareProfile::preset_names();
  nlohmann::json schedules = nlohmann::json::array();
  for (const theory::ScheduleTraits& t : theory::all_schedules()) schedules.push_back(t.name);
  return nlohmann::json::array({
      {{"name", "schedule"},
       {"type", "choice"},
       {"choices", schedules},
       {"value", kDefaultSchedule}},
      {{"name", "stages"}, {"type", "int"}, {"min", 1}, {"max", 8}, {"value", 4}},
      {{"name", "microbatches"}, {"type", "int"}, {"min", 1}, {"max", 32}, {"value", 8}},
      // The global batch stays put while M moves (micro-batch size = batch / M), as in the lesson.
      {{"name", "batch"}, {"type", "int"}, {"min", 1}, {"max", 256}, {"value", kDefaultBatch}},
      {{"name", "virtual_stages"}, {"type", "int"}, {"min", 1}, {"max", 4}, {"value", 1}},
      {{"name", "profile"}, {"type", "choice"}, {"choices", profiles}, {"value", "8xH100-NVLink"}},
  });
}

trace::Trace classroom_rerun(const nlohmann::json& params) {
  PipelineOptions p;
  p.schedule = params.value("schedule", kDefaultSchedule);
  p.stages = params.value("stages", 4);
  p.microbatches = params.value("microbatches", 8);
  p.virtual_stages = params.value("virtual_stages", 1);
  const theory::ScheduleTraits& schedule = theory::traits(theory::schedule_kind(p.schedule));
  if (schedule.kind == theory::ScheduleKind::naive) p.microbatches = 1;
  // The V schedules and DualPipe bring their own two chunks per stage; the chunk slider is
  // interleaved's.
  const bool v_shape = schedule.v_shape || schedule.bidirectional;
  if (v_shape) p.virtual_stages = 1;
  CommonOptions c;
  c.ranks = p.stages;
  c.profile = params.value("profile", std::string("8xH100-NVLink"));
  c.layers = std::max(8, p.stages * (v_shape ? 2 : p.virtual_stages));
  c.dim = 64;
  c.heads = 4;
  c.seq = 32;
  c.batch =
      params.value("batch", kDefaultBatch);  // train_pipeline refuses an M that does not divide it
  c.steps = 1;
  c.quiet = true;
  std::ostringstream quiet;
  return train_pipeline(c, p, quiet).trace;  // invalid combinations throw: the dashboard says why
}

namespace {

nlohmann::json* find_spec(nlohmann::json& params, const std::string& name) {
  for (auto& spec : params)
    if (spec.value("name", std::string()) == name) return &spec;
  return nullptr;
}

std::string names_of(const nlohmann::json& params) {
  std::string names;
  for (const auto& spec : params) names += (names.empty() ? "" : ", ") + spec.value("name", "");
  return names;
}

// One "name=value": the value checked against the spec (an int in range, or one of the choices).
std::optional<std::string> apply_setting(nlohmann::json& params, const std::string& item) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
    return fmt::format("--set: '{}' is not name=value (e.g. --set schedule=gpipe,microbatches=16)",
                       item);
  const std::string name = item.substr(0, eq), text = item.substr(eq + 1);
  nlohmann::json* spec = find_spec(params, name);
  if (!spec)
    return fmt::format("--set: no parameter '{}' (the parameters: {})", name, names_of(params));
  if (spec->value("type", std::string()) == "choice") {
    for (const auto& c : (*spec)["choices"])
      if (c == text) {
        (*spec)["value"] = text;
        return std::nullopt;
      }
    return fmt::format("--set: {}={} is not one of {}", name, text, (*spec)["choices"].dump());
  }
  const int lo = spec->value("min", 0), hi = spec->value("max", 0);
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi)
    return fmt::format("--set: {}={} is not a whole number from {} to {}", name, text, lo, hi);
  (*spec)["value"] = value;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> apply_settings(nlohmann::json& params, const std::string& settings) {
  nlohmann::json changed = params;
  std::stringstream items(settings);
  for (std::string item; std::getline(items, item, ',');)
    if (auto error = apply_setting(changed, item)) return error;
  params = std::move(changed);
  return std::nullopt;
}

std::optional<Series> parse_series(const nlohmann::json& params, const std::string& text,
                                   std::string& error) {
  const size_t eq = text.find('='), dots = text.find("..");
  Series s;
  const bool shaped = eq != std::string::npos && dots != std::string::npos && dots > eq;
  if (shaped) {
    s.name = text.substr(0, eq);
    const std::string a = text.substr(eq + 1, dots - eq - 1), b = text.substr(dots + 2);
    const auto ra = std::from_chars(a.data(), a.data() + a.size(), s.first);
    const auto rb = std::from_chars(b.data(), b.data() + b.size(), s.last);
    if (ra.ec != std::errc() || rb.ec != std::errc() || ra.ptr != a.data() + a.size() ||
        rb.ptr != b.data() + b.size() || s.first > s.last)
      s.name.clear();
  }
  if (!shaped && eq != std::string::npos && eq > 0 && eq + 1 < text.size()) {  // a list
    s.name = text.substr(0, eq);
    std::stringstream items(text.substr(eq + 1));
    for (std::string item; std::getline(items, item, ',');) {
      int v = 0;
      const auto r = std::from_chars(item.data(), item.data() + item.size(), v);
      if (r.ec != std::errc() || r.ptr != item.data() + item.size() ||
          (!s.values.empty() && v <= s.values.back())) {
        s.name.clear();
        break;
      }
      s.values.push_back(v);
    }
    if (!s.values.empty()) s.first = s.values.front(), s.last = s.values.back();
  }
  if (s.name.empty()) {
    error = fmt::format(
        "--series: '{}' is not name=first..last or name=a,b,c ascending (e.g. "
        "microbatches=1,2,4,8,16)",
        text);
    return std::nullopt;
  }
  nlohmann::json copy = params;
  const nlohmann::json* spec = find_spec(copy, s.name);
  if (!spec || spec->value("type", std::string()) != "int") {
    error = fmt::format(
        "--series: '{}' is not a whole-number parameter (e.g. microbatches, "
        "stages)",
        s.name);
    return std::nullopt;
  }
  const int lo = spec->value("min", 0), hi = spec->value("max", 0);
  if (s.first < lo || s.last > hi) {
    error = fmt::format("--series: {}={}..{} is outside {}..{}", s.name, s.first, s.last, lo, hi);
    return std::nullopt;
  }
  return s;
}

std::vector<int> Series::steps() const {
  if (!values.empty()) return values;
  std::vector<int> all;
  for (int v = first; v <= last; ++v) all.push_back(v);
  return all;
}

std::string series_png_path(const std::string& png, const Series& series, int value) {
  const std::filesystem::path p(png);
  const int digits = static_cast<int>(std::to_string(series.last).size());
  const std::string stem =
      fmt::format("{}-{}-{:0{}}", p.stem().string(), series.name, value, digits);
  return (p.parent_path() / (stem + p.extension().string())).string();
}

std::optional<std::string> parse_versus(const nlohmann::json& params, const std::string& versus,
                                        std::vector<std::string>& schedules) {
  nlohmann::json copy = params;
  const nlohmann::json choices = (*find_spec(copy, "schedule"))["choices"];
  std::vector<std::string> items;
  std::stringstream list(versus);
  for (std::string item; std::getline(list, item, ',');) {
    if (std::find(choices.begin(), choices.end(), item) == choices.end())
      return fmt::format("--versus: '{}' is not a schedule (one of {})", item, choices.dump());
    items.push_back(item);
  }
  if (items.size() < 2 || items.size() > kMaxVersus)
    return fmt::format("--versus takes two to six schedules (got {}), e.g. --versus gpipe,1f1b",
                       items.size());
  schedules.insert(schedules.end(), items.begin(), items.end());
  return std::nullopt;
}

#ifdef MGPU_HAVE_VIZ
namespace {
// The first of the names --series derives that could not be written, as its one line.
std::optional<std::string> unwritable_series_path(const std::string& png, const Series& series) {
  for (int value : series.steps()) {
    try {
      check_output_path(series_png_path(png, series, value), "--series screenshot");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
  }
  return std::nullopt;
}

// A series keeps the global batch: every micro-batch count must divide it (checked before the
// first run, so a series is all slides or one line).
std::optional<std::string> series_batch_error(const nlohmann::json& params, const Series& s) {
  if (s.name != "microbatches" && s.name != "batch") return std::nullopt;
  nlohmann::json copy = params;
  int batch = find_spec(copy, "batch")->value("value", kDefaultBatch);
  int m = find_spec(copy, "microbatches")->value("value", 8);
  for (int value : s.steps()) {
    (s.name == "batch" ? batch : m) = value;
    if (batch % m != 0)
      return fmt::format(
          "--series {}: the global batch {} does not split into {} micro-batches (the series "
          "keeps the batch: list values that divide it, e.g. microbatches=1,2,4,8,16, or --set "
          "batch=...)",
          s.name, batch, m);
  }
  return std::nullopt;
}

std::optional<std::string> read_versus(viz::RerunHook& hook, const std::string& versus) {
  static_assert(kMaxVersus == viz::kMaxCompared);
  if (auto error = parse_versus(hook.params, versus, hook.split_values)) return error;
  hook.split_by = "schedule";
  return std::nullopt;
}
}  // namespace

int run_classroom(const ClassroomOptions& o, std::ostream& err) {
  viz::DashboardOptions opt;
  opt.title = "mgpu-lab classroom - pipeline bubbles";
  opt.presentation = o.presentation;
  opt.width = o.width;
  opt.show_memory = !o.hide_memory;
  viz::RerunHook hook{classroom_rerun, classroom_parameters()};
  std::optional<std::string> error = apply_settings(hook.params, o.settings);
  if (!error && !o.versus.empty()) error = read_versus(hook, o.versus);
  std::optional<Series> series;
  if (!error && !o.series.empty()) {
    std::string why;
    series = parse_series(hook.params, o.series, why);
    if (!series)
      error = why;
    else if (o.screenshot.empty())
      error = "--series writes screenshots: add --screenshot out/series.png";
    else
      error = series_batch_error(hook.params, *series);
    if (!error) error = unwritable_series_path(o.screenshot, *series);  // before the first run
  }
  if (error) {
    err << "mgpu viz: error: " << *error << "\n";
    return 2;
  }
  if (hook.split_by.empty()) opt.labels = {"pipeline"};
  opt.rerun = std::move(hook);
  if (!series) {
    viz::Dashboard dashboard(opt);
    if (!dashboard.rerun_error().empty()) {
      err << "mgpu viz: error: " << dashboard.rerun_error() << "\n";
      return 2;
    }
    if (o.screenshot.empty()) return viz::run_dashboard(opt);
    return viz::render_screenshot(dashboard, o.screenshot, o.width, o.height);
  }
  for (int value : series->steps()) {
    viz::DashboardOptions one = opt;
    apply_setting(one.rerun->params, fmt::format("{}={}", series->name, value));
    viz::Dashboard dashboard(one);
    if (!dashboard.rerun_error().empty()) {
      err << "mgpu viz: error: " << series->name << "=" << value << ": " << dashboard.rerun_error()
          << "\n";
      return 2;
    }
    const std::string png = series_png_path(o.screenshot, *series, value);
    if (const int rc = viz::render_screenshot(dashboard, png, o.width, o.height); rc != 0)
      return rc;
    err << png << "\n";
  }
  return 0;
}
#else
int run_classroom(const ClassroomOptions&, std::ostream& err) {
  err << "mgpu viz: error: this build has no dashboard (install libimgui-dev libglfw3-dev "
         "libgl-dev and rebuild)\n";
  return 2;
}
#endif

}  // namespace mgpu::lessons
