// The page's `mgpu run`: lessons/run_command.cpp's command over the page's lessons, with a check
// that refuses what the browser cannot do; --viz, set behind the user's back, hands the trace
// over (the page's own show_trace below, where natively a window opens).
#include "web/lessons_page.h"

#include <mutex>
#include <sstream>

#include <CLI/CLI.hpp>

#include "lessons/cli.h"
#include "lessons/context_parallel.h"
#include "lessons/ddp.h"
#include "lessons/expert_parallel.h"
#include "lessons/hybrid.h"
#include "lessons/lesson.h"
#include "lessons/pipeline.h"
#include "lessons/sequence_parallel.h"
#include "lessons/tensor_parallel.h"
#include "lessons/viz_command.h"
#include "lessons/zero.h"

namespace mgpu::lessons {

namespace {
std::mutex handed_over_mutex;
std::optional<trace::Trace>* handed_over = nullptr;  // where the running lesson's trace goes
}  // namespace

// What `--viz` does on the page: the trace goes to the page's dashboard (lessons call this when
// they finish, as natively they open a window).
int show_trace(const trace::Trace& trace, const std::string&, std::ostream&) {
  std::lock_guard lock(handed_over_mutex);
  if (handed_over) *handed_over = trace;
  return 0;
}

}  // namespace mgpu::lessons

namespace mgpu::web {

namespace {

std::vector<std::unique_ptr<lessons::Lesson>> lessons_of_the_page() {
  std::vector<std::unique_ptr<lessons::Lesson>> l;
  l.push_back(lessons::make_data_parallel_lesson());
  l.push_back(lessons::make_ddp_lesson());
  l.push_back(lessons::make_pipeline_lesson());
  l.push_back(lessons::make_tensor_parallel_lesson());
  l.push_back(lessons::make_sequence_parallel_lesson());
  l.push_back(lessons::make_context_parallel_lesson());
  l.push_back(lessons::make_expert_parallel_lesson());
  l.push_back(lessons::make_zero_lesson());
  l.push_back(lessons::make_hybrid_lesson());
  return l;
}

bool given(const CLI::App& app, const char* name) {
  const CLI::Option* o = app.get_option_no_throw(name);
  return o && o->count() > 0;
}

bool names_a_file(const std::string& value) {
  return value.find('/') != std::string::npos ||
         (value.size() > 5 && value.compare(value.size() - 5, 5, ".json") == 0);
}

// The options that need what a browser tab does not have, refused in one line.
std::optional<std::string> refuse_in_browser(const CLI::App& app, lessons::CommonOptions& c) {
  if (given(app, "--viz"))
    return "--viz opens a window: the page draws the trace beside the report already (drop it)";
  if (given(app, "--trace"))
    return "--trace writes a file, and the page keeps none: it draws the trace itself (drop it)";
  for (const char* name : {"--checkpoint", "--resume", "--checkpoint-every"})
    if (given(app, name))
      return std::string(name) + " needs checkpoint files, and the page keeps none (drop it)";
  if (given(app, "--data-file"))
    return "--data-file reads a file of yours, which the page cannot open (use --task)";
  if (c.device == "cuda" || c.clock == "cuda")
    return "--" + std::string(c.device == "cuda" ? "device" : "clock") +
           " cuda needs a GPU, and the page runs on the browser's threads (use --device cpu or "
           "phantom)";
  for (const auto& [name, value] : {std::pair{"--profile", c.profile}, {"--model", c.model}})
    if (given(app, name) && names_a_file(value))
      return std::string(name) + " " + value +
             " reads a file, which the page cannot open (use a preset: `mgpu profiles`, docs)";
  if (c.impl != "reference")
    return "--impl " + c.impl +
           ": the page runs the reference implementations (your exercises/ code is not in it)";
  c.viz = true;  // the trace to the page: show_trace above
  return std::nullopt;
}

}  // namespace

std::vector<std::string> page_lessons() {
  std::vector<std::string> names;
  for (auto& lesson : lessons_of_the_page()) names.push_back(lesson->name());
  return names;
}

LessonRun run_lesson(const std::string& lesson, const std::string& args) {
  LessonRun run;
  std::vector<std::string> words = CLI::detail::split_up(args);
  words.insert(words.begin(), lesson);
  {
    std::lock_guard lock(lessons::handed_over_mutex);
    lessons::handed_over = &run.trace;
  }
  std::ostringstream out, err;
  run.rc = lessons::run_lesson_command(lessons_of_the_page(), words, out, err, refuse_in_browser);
  {
    std::lock_guard lock(lessons::handed_over_mutex);
    lessons::handed_over = nullptr;
  }
  run.report = out.str();
  run.error = err.str();
  return run;
}

}  // namespace mgpu::web
