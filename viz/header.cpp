// The words above and beside the panels: the run's name line (lesson, schedule, mesh, clock) and
// the measured-vs-theory line, with units, thousands separators and what each number is.
#include <cmath>
#include <cstdio>
#include <string>

#include "viz/view_model.h"

namespace mgpu::viz {

namespace {

bool has_number(const nlohmann::json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_number();
}
std::string text_of(const nlohmann::json& o, const char* key) {
  if (!o.is_object() || !o.contains(key)) return {};
  if (o[key].is_string()) return o[key].get<std::string>();
  if (o[key].is_number_integer()) return format_count(o[key].get<double>());
  return {};
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool starts_with(const std::string& s, const std::string& head) {
  return s.rfind(head, 0) == 0;
}

// "bytes_sent_per_rank" -> "bytes sent per rank".
std::string words(std::string key) {
  for (char& c : key)
    if (c == '_') c = ' ';
  return key;
}

// A metadata "predictions" value with its unit: bytes, seconds, a ratio, a count.
std::string with_unit(const std::string& key, double value) {
  if (key.find("bytes") != std::string::npos) return format_bytes(value);
  if (ends_with(key, "seconds")) return format_duration(value);
  if (key.find("speedup") != std::string::npos) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2fx", value);
    return buf;
  }
  if (ends_with(key, "fraction")) return format_percent(value);
  if (value == std::floor(value) && std::abs(value) < 1e15) return format_count(value);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", value);
  return buf;
}

// Lessons store a few measured figures under "predictions" beside the theory (the DDP lesson's
// speed-up on the modeled clock, grad accumulation's largest parameter difference): label them
// so.
bool is_measured(const std::string& key) {
  return starts_with(key, "speedup") || starts_with(key, "max_");
}

double mean_over_ranks(const TraceView& v, double RankSummary::*field) {
  double sum = 0;
  for (int r = 0; r < v.num_ranks(); ++r) sum += v.summary(r).*field;
  return v.num_ranks() ? sum / v.num_ranks() : 0;
}

}  // namespace

std::string format_percent(double fraction) {
  // A trace may carry any double (1e308 printed "inf%"): no percentage beyond a trillion.
  if (!(std::abs(fraction) <= 1e10)) return "(out of range)";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * fraction);
  return buf;
}

std::string format_count(double value) {
  const bool negative = value < 0;
  std::string digits = std::to_string(static_cast<long long>(std::llround(std::abs(value))));
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return negative ? "-" + digits : digits;
}

std::string describe_run(const TraceView& view) {
  const auto& md = view.trace().metadata;
  const nlohmann::json none = nlohmann::json::object();
  const auto& config = md.is_object() && md.contains("config") ? md["config"] : none;
  std::string line;
  auto add = [&](const std::string& part) {
    if (!part.empty()) line += (line.empty() ? "" : "   ") + part;
  };
  if (const std::string lesson = text_of(md, "lesson"); !lesson.empty()) add("lesson " + lesson);
  if (const std::string s = text_of(config, "schedule"); !s.empty()) add("schedule " + s);
  std::string mesh = std::to_string(view.num_ranks()) + (view.num_ranks() == 1 ? " GPU" : " GPUs");
  if (const auto shape = view.mesh()) {
    std::string axes;
    for (const char* axis : {"dp", "pp", "cp", "tp"}) {
      if (has_number(config, axis) && config[axis].get<int>() > 1)
        axes += (axes.empty() ? "" : " x ") + std::string(axis) + " " +
                std::to_string(config[axis].get<int>());
    }
    if (!axes.empty()) mesh += " (mesh " + axes + ")";
  }
  add(mesh);
  if (has_number(config, "stages") && !view.mesh()) add(text_of(config, "stages") + " stages");
  if (has_number(config, "virtual_stages") && config["virtual_stages"].get<int>() > 1)
    add(text_of(config, "virtual_stages") + " virtual stages per GPU");
  // The global batch beside the micro-batches: a series over M keeps it, and every slide says so.
  const bool batch = has_number(config, "batch") && config["batch"].is_number_integer();
  if (has_number(config, "microbatches")) {
    const std::string m = text_of(config, "microbatches") + " micro-batches";
    const int mb =
        config["microbatches"].is_number_integer() ? config["microbatches"].get<int>() : 0;
    if (batch && mb > 0 && config["batch"].get<int>() % mb == 0)
      add("batch " + text_of(config, "batch") + " = " + m + " of " +
          std::to_string(config["batch"].get<int>() / mb));
    else
      add(m);
  } else if (batch) {
    add("batch " + text_of(config, "batch"));
  }
  if (const std::string clock = text_of(md, "clock"); !clock.empty()) add(clock + " clock");
  if (md.is_object() && md.contains("profile")) add(text_of(md["profile"], "name"));
  // Injected faults (core/runtime/faults.h): "injected: rank 1 computes 2x slower".
  if (md.is_object() && md.contains("faults") && md["faults"].is_object() &&
      md["faults"].contains("injected") && md["faults"]["injected"].is_array()) {
    std::string faults;
    for (const auto& f : md["faults"]["injected"])
      if (f.is_string()) faults += (faults.empty() ? "" : "; ") + f.get<std::string>();
    if (!faults.empty()) add("injected: " + faults);
  }
  return line;
}

std::string describe_predictions(const TraceView& view) {
  std::string line;
  auto add = [&](const std::string& part) { line += (line.empty() ? "" : "    ") + part; };
  const auto& md = view.trace().metadata;
  if (!md.is_object() || !md.contains("predictions") || !md["predictions"].is_object()) return {};
  for (const auto& [key, value] : md["predictions"].items()) {
    if (!value.is_number()) continue;
    const double v = value.get<double>();
    if (key == "bubble_fraction" || key == "overlap_fraction") {
      const double measured = mean_over_ranks(
          view, key == "bubble_fraction" ? &RankSummary::bubble : &RankSummary::overlap);
      add(words(key.substr(0, key.find('_'))) + " " + format_percent(measured) +
          " measured, mean over ranks (theory " + format_percent(v) + ")");
    } else {
      add(words(key) + " " + with_unit(key, v) + (is_measured(key) ? " (measured)" : " (theory)"));
    }
  }
  return line;
}

}  // namespace mgpu::viz
