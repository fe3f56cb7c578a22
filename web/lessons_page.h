// The lessons on the page: `mgpu run LESSON ARGS` as the native program runs it (the same parser,
// the same report, the same one-line errors), for the lessons that run on the modeled clock, with
// what a browser cannot do (files, a GPU, a window of its own) refused in one line, and the run's
// trace handed to the page's dashboard instead of a file.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/runtime/trace_event.h"

namespace mgpu::web {

// The lessons compiled into the page, in teaching order.
std::vector<std::string> page_lessons();

struct LessonRun {
  int rc = 0;                         // the native exit code: 0, 1 a failure, 2 bad input
  std::string report;                 // what the native `mgpu run` prints on standard output
  std::string error;                  // ... and on standard error (one line for bad input)
  std::optional<trace::Trace> trace;  // the run's trace (none when it failed before training)
};

// Runs `mgpu run LESSON ARGS` (ARGS split as a shell splits words: quotes group). One at a time.
LessonRun run_lesson(const std::string& lesson, const std::string& args);

}  // namespace mgpu::web
