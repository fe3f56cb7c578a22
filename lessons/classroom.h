// Classroom mode: the dashboard re-runs the pipeline lesson in-process (modeled clock) whenever a
// teacher moves a slider — micro-batches, stages, schedule, virtual stages, profile — so bubbles
// shrink and grow live on the projector.
#pragma once
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "core/trace/event.h"

namespace mgpu::lessons {

// The parameters the dashboard shows, with their ranges and defaults.
nlohmann::json classroom_parameters();
// Runs the pipeline lesson quietly with these parameters and returns its trace.
trace::Trace classroom_rerun(const nlohmann::json& params);
// Opens the dashboard in classroom mode (or renders one frame to `screenshot`).
int run_classroom(bool presentation, const std::string& screenshot, int width, int height,
                  std::ostream& err);

}  // namespace mgpu::lessons
