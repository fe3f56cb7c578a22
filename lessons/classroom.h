// Classroom mode: the dashboard re-runs the pipeline lesson in-process (modeled clock) whenever a
// teacher moves a slider — micro-batches, stages, schedule, virtual stages, profile — so bubbles
// shrink and grow live on the projector. The sliders can be set from the command line
// (--set schedule=gpipe,microbatches=16), stepped through a series of screenshots
// (--series microbatches=1..32), and two schedules shown side by side under the same sliders
// (--versus gpipe,1f1b).
#pragma once
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/runtime/trace_event.h"

namespace mgpu::lessons {

// The parameters the dashboard shows, with their ranges and defaults.
nlohmann::json classroom_parameters();
// Runs the pipeline lesson quietly with these parameters and returns its trace.
trace::Trace classroom_rerun(const nlohmann::json& params);

// Sets parameter values from "name=value,name=value" (the specs' "value" fields). On a bad name or
// value: the one-line error (what is wrong, what would work), and `params` unchanged.
std::optional<std::string> apply_settings(nlohmann::json& params, const std::string& settings);

// "microbatches=1..8": one integer parameter stepped over a range, or over a list of values
// ("microbatches=1,2,4,8,16": the divisors of the global batch, which a series keeps).
struct Series {
  std::string name;
  int first = 0, last = 0;
  std::vector<int> values;  // the list's values; empty: first..last
  std::vector<int> steps() const;
};
// Parses and checks a series against the parameters (an int parameter, within its range).
std::optional<Series> parse_series(const nlohmann::json& params, const std::string& text,
                                   std::string& error);
// "out/m.png", microbatches, 8, 32 -> "out/m-microbatches-08.png" (zero-padded to sort).
std::string series_png_path(const std::string& png, const Series& series, int value);

// "gpipe,1f1b" (--versus): two to six of the schedule control's choices, run side by side under
// the same sliders; appended to `schedules`. On a bad list: its one-line error, nothing appended.
inline constexpr size_t kMaxVersus = 6;
std::optional<std::string> parse_versus(const nlohmann::json& params, const std::string& versus,
                                        std::vector<std::string>& schedules);

struct ClassroomOptions {
  bool presentation = false;
  std::string screenshot;  // a PNG instead of a window (with a series: one PNG per value)
  int width = 1600, height = 0;
  std::string settings;      // --set
  std::string series;        // --series
  std::string versus;        // --versus gpipe,1f1b: these schedules side by side, same sliders
  bool hide_memory = false;  // --memory off
};
// Opens the dashboard in classroom mode (or renders screenshots). 2 with one line on bad options.
int run_classroom(const ClassroomOptions& options, std::ostream& err);

}  // namespace mgpu::lessons
