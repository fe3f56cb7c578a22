// The classroom in a browser tab: the native dashboard's classroom mode (the pipeline lesson
// re-run in-process on rank pthreads, modeled clock) drawn by ImGui on a WebGL2 canvas, and the
// lessons that run on the modeled clock, each with its report (web/lessons_page.h).
// The page's URL parameters become arguments (web/shell.html): `--set NAME=V,...`,
// `--series NAME=A..B` and `--versus A,B` as in `mgpu viz`, `--lesson NAME --args TEXT` as in
// `mgpu run NAME TEXT`. JavaScript calls the exported mgpu_* functions: set values (what a
// slider does), step a series, run a lesson, open a dropped trace file, and read the state
// (figures, report, errors, a frame count the browser test polls for).
#include <emscripten/emscripten.h>

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "lessons/classroom.h"
#include "viz/dashboard.h"
#include "web/figures.h"
#include "web/lessons_page.h"

namespace {

using mgpu::viz::Dashboard;
using mgpu::viz::DashboardOptions;

struct Page {
  GLFWwindow* window = nullptr;
  std::unique_ptr<Dashboard> dashboard;
  nlohmann::json params;  // the classroom's parameter specs (their values: the shown run's)
  std::optional<mgpu::lessons::Series> series;
  size_t series_step = 0;
  std::string error;    // one line on the page: a bad URL parameter, an unreadable trace
  std::string figures;  // the shown runs' figures (web/figures.h)
  int generation = 0;   // +1 whenever the figures change (a run, a trace opened)
  int frames = 0;       // frames drawn since then: the browser test waits for a few
  std::string status;   // the last mgpu_status() answer (its storage)
  std::string versus;   // the classroom's --versus schedules ("" none)
  // The shown lesson ("" the classroom), its report and its line on failure; the run under way.
  std::string lesson, report;
  int lesson_runs = 0;  // lesson runs finished (shown): the browser test waits for the next
  std::shared_ptr<mgpu::web::LessonRun> pending;
  std::function<bool()> pending_finished;
  std::string pending_lesson;
};
Page page;

// A re-run on its own thread (its rank threads start from there): the page keeps drawing, and
// the dashboard shows the runs in the first frame after they finish.
std::function<bool()> run_off_the_main_thread(std::function<void()> work) {
  auto finished = std::make_shared<std::atomic<bool>>(false);
  std::thread([work = std::move(work), finished] {
    work();
    finished->store(true, std::memory_order_release);
  }).detach();
  return [finished] { return finished->load(std::memory_order_acquire); };
}

// A fresh classroom dashboard with these parameter values (the native `--set`).
void show_classroom(const nlohmann::json& params) {
  DashboardOptions opt;
  opt.title = "mgpu-lab classroom - pipeline bubbles";
  opt.labels = {"pipeline"};
  opt.rerun = mgpu::viz::RerunHook{mgpu::lessons::classroom_rerun, params};
  opt.rerun->start = run_off_the_main_thread;
  if (!page.versus.empty()) {  // checked when it was given
    (void)mgpu::lessons::parse_versus(params, page.versus, opt.rerun->split_values);
    opt.rerun->split_by = "schedule";
    opt.labels.clear();
  }
  page.dashboard = std::make_unique<Dashboard>(std::move(opt));
  page.params = params;
  page.lesson.clear();
  page.report.clear();
}

// "gpipe,1f1b": these schedules side by side from the next classroom on (the native --versus);
// "" none. 0, or 2 and the line (nothing changes).
int set_versus(const std::string& versus) {
  std::vector<std::string> schedules;
  if (!versus.empty())
    if (auto error = mgpu::lessons::parse_versus(page.params, versus, schedules)) {
      page.error = *error;
      return 2;
    }
  page.versus = versus;
  return 0;
}

// `mgpu run LESSON ARGS` off the main thread; the frame after it finishes shows its report and
// trace (finish_lesson). 0 started, 3 while a run (a lesson's or the classroom's) is going.
int start_lesson(const std::string& lesson, const std::string& args) {
  if (page.pending || (page.dashboard && page.dashboard->rerun_pending())) return 3;
  page.pending = std::make_shared<mgpu::web::LessonRun>();
  page.pending_lesson = lesson;
  page.pending_finished = run_off_the_main_thread(
      [run = page.pending, lesson, args] { *run = mgpu::web::run_lesson(lesson, args); });
  return 0;
}

void finish_lesson() {
  if (!page.pending || !page.pending_finished()) return;
  mgpu::web::LessonRun run = std::move(*page.pending);
  page.pending.reset();
  // The report panel shows what the lesson printed (--help's text too); a run that printed
  // nothing (an unknown lesson) leaves its line alone, over the classroom when nothing was shown.
  if (!page.dashboard && !run.trace) show_classroom(page.params);
  page.report = std::move(run.report);
  page.lesson = run.trace || !page.report.empty() ? page.pending_lesson : std::string();
  page.error = run.error.substr(0, run.error.find_last_not_of('\n') + 1);
  if (run.trace) {
    DashboardOptions opt;
    opt.title = "mgpu-lab - " + page.lesson;
    opt.traces.push_back(std::move(*run.trace));
    opt.labels = {page.lesson};
    page.dashboard = std::make_unique<Dashboard>(std::move(opt));
    page.dashboard->fit_last_step();
    page.series.reset();
  }
  ++page.lesson_runs;
  page.frames = 0;
}

// Applies "name=value,..." over `params` and shows the classroom with them; on a bad value, its
// line and nothing changes.
int show_settings(const std::string& settings, nlohmann::json params) {
  if (auto error = mgpu::lessons::apply_settings(params, settings)) {
    page.error = *error;
    return 2;
  }
  page.error.clear();
  show_classroom(params);
  return 0;
}

void start_series(const std::string& text) {
  std::string why;
  page.series = mgpu::lessons::parse_series(page.params, text, why);
  if (!page.series) {
    page.error = why;
    return;
  }
  page.series_step = 0;
  const std::string first = page.series->name + "=" + std::to_string(page.series->steps()[0]);
  if (show_settings(first, page.params) != 0) page.series.reset();
}

void frame() {
  finish_lesson();
  const int width = EM_ASM_INT({ return Module.canvas.clientWidth; });
  const int height = EM_ASM_INT({ return Module.canvas.clientHeight; });
  int w = 0, h = 0;
  glfwGetWindowSize(page.window, &w, &h);
  if (w != width || h != height) glfwSetWindowSize(page.window, width, height);
  glfwPollEvents();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::NewFrame();
  const ImVec2 size = ImGui::GetIO().DisplaySize;
  if (page.dashboard) {
    page.dashboard->fit_to_height(static_cast<int>(size.y));
    page.dashboard->frame(size.x, size.y);
  } else {  // a lesson from the URL, before its first run is shown
    ImGui::Text("running mgpu run %s ...", page.pending_lesson.c_str());
  }
  ImGui::Render();
  int fw = 0, fh = 0;
  glfwGetFramebufferSize(page.window, &fw, &fh);
  glViewport(0, 0, fw, fh);
  glClearColor(0.06f, 0.06f, 0.07f, 1);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  // A slider moved (a re-run) or a trace opened: new figures, printed as the native run prints.
  // (Not while a run is on its way: a new classroom has no views until its first one is shown.)
  std::string figures =
      page.dashboard ? mgpu::web::classroom_figures(page.dashboard->views()) : std::string();
  if (page.dashboard && !page.dashboard->rerun_pending() && figures != page.figures) {
    page.figures = std::move(figures);
    ++page.generation;
    page.frames = 0;
    std::printf("%s", page.figures.c_str());
    std::fflush(stdout);
  }
  ++page.frames;
}

}  // namespace

extern "C" {

// {"generation", "frames", "error", "rerun_error", "figures", "running", "series", "versus",
// "lesson", "report", "lesson_runs", "lesson_running"}: the page's state as JSON.
EMSCRIPTEN_KEEPALIVE const char* mgpu_status() {
  nlohmann::json s = {{"generation", page.generation},
                      {"frames", page.frames},
                      {"error", page.error},
                      {"rerun_error", page.dashboard ? page.dashboard->rerun_error() : ""},
                      {"figures", page.figures},
                      {"running", page.dashboard && page.dashboard->rerun_pending()},
                      {"series", nullptr},
                      {"versus", page.versus},
                      {"lesson", page.lesson},
                      {"report", page.report},
                      {"lesson_runs", page.lesson_runs},
                      {"lesson_running", page.pending != nullptr}};
  if (page.series) {
    s["series"] = {{"name", page.series->name},
                   {"value", page.series->steps()[page.series_step]},
                   {"step", page.series_step + 1},
                   {"steps", page.series->steps().size()}};
  }
  page.status = s.dump();
  return page.status.c_str();
}

// "name=value,...": the native --set, over the defaults (one run): the classroom again after a
// lesson. 0, 2 and the line, or 3 while a lesson runs.
EMSCRIPTEN_KEEPALIVE int mgpu_set(const char* settings) {
  if (page.pending) return 3;
  return show_settings(settings, mgpu::lessons::classroom_parameters());
}

// "gpipe,1f1b": the classroom's schedules side by side (`mgpu viz --versus`), "" one run; the
// classroom shown again with the current values. 0, 2 and the line, or 3 while a lesson runs.
EMSCRIPTEN_KEEPALIVE int mgpu_versus(const char* versus) {
  if (page.pending) return 3;
  if (set_versus(versus) != 0) return 2;
  page.error.clear();
  show_classroom(page.params);
  return 0;
}

// `mgpu run LESSON ARGS` on the page's threads: its report beside its trace once it finishes
// (mgpu_status: lesson_runs grows by one; a bad option is the native one line, in "error").
// 0 started, 3 while a run is going.
EMSCRIPTEN_KEEPALIVE int mgpu_run_lesson(const char* lesson, const char* args) {
  return start_lesson(lesson, args);
}

// The lessons the page runs, as a JSON list of names.
EMSCRIPTEN_KEEPALIVE const char* mgpu_lessons() {
  static const std::string names = nlohmann::json(mgpu::web::page_lessons()).dump();
  return names.c_str();
}

// What moving one control does: that parameter re-runs the lesson (an error line on the page
// when the combination is refused, the controls back where they were). 0, 2 on a bad value, 3
// while the last change's run is still going.
EMSCRIPTEN_KEEPALIVE int mgpu_move(const char* name, const char* value) {
  // One run at a time: ask again when it is shown. A lesson's or a trace's dashboard has no
  // controls.
  if (!page.dashboard || page.pending || page.dashboard->rerun_pending()) return 3;
  if (!page.dashboard->options().rerun) return 2;
  nlohmann::json checked = page.params;
  if (auto error = mgpu::lessons::apply_settings(checked, std::string(name) + "=" + value)) {
    page.error = *error;
    return 2;
  }
  page.error.clear();
  for (const auto& spec : checked)
    if (spec.value("name", std::string()) == name)
      if (!page.dashboard->set_parameter(name, spec["value"])) return 2;
  page.params = page.dashboard->options().rerun->params;
  return 0;
}

// The series' next (+1) or previous (-1) value. 0, or 2 without a series or past its ends.
EMSCRIPTEN_KEEPALIVE int mgpu_series_step(int delta) {
  if (!page.series) return 2;
  const auto steps = page.series->steps();
  const long next = static_cast<long>(page.series_step) + delta;
  if (next < 0 || next >= static_cast<long>(steps.size())) return 2;
  page.series_step = static_cast<size_t>(next);
  return mgpu_move(page.series->name.c_str(), std::to_string(steps[page.series_step]).c_str());
}

// Opens what the page wrote into its file system from a drop, as `mgpu viz PATH` does: a trace
// file (the project's Chrome-trace JSON, a PyTorch profiler trace) or a folder of PyTorch
// profiler files, one per rank. 0, or 2 and the reader's line (the classroom stays).
EMSCRIPTEN_KEEPALIVE int mgpu_open_trace(const char* path) {
  if (page.pending) return 3;
  mgpu::viz::LoadedTrace loaded = mgpu::viz::load_trace_or_error(path);
  if (!loaded.trace) {
    page.error = loaded.error;
    return 2;
  }
  page.error.clear();
  page.series.reset();
  DashboardOptions opt;
  opt.traces.push_back(std::move(*loaded.trace));
  opt.labels = {std::filesystem::path(path).filename().string()};
  page.dashboard = std::make_unique<Dashboard>(std::move(opt));
  page.dashboard->fit_last_step();
  page.lesson.clear();
  page.report.clear();
  return 0;
}

}  // extern "C"

namespace {

// What the URL asks for (web/shell.html passes each as `--NAME VALUE`): a lesson, else the
// classroom with its values, or (a bad one: its line on the page) the defaults.
void open_from_url(int argc, char** argv) {
  std::string settings, series, versus, lesson, args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    for (auto [name, value] : {std::pair{"--set", &settings},
                               {"--series", &series},
                               {"--versus", &versus},
                               {"--lesson", &lesson},
                               {"--args", &args}})
      if (flag == name) *value = argv[i + 1];
  }
  page.params = mgpu::lessons::classroom_parameters();
  // Not ignored: a lesson's link with the classroom's values (or options without a lesson) is
  // refused in one line, the classroom shown.
  if (!lesson.empty() && (!settings.empty() || !series.empty() || !versus.empty())) {
    page.error = "?set=, ?series= and ?versus= drive the classroom, ?lesson= a lesson: not both";
    show_classroom(page.params);
    return;
  }
  if (lesson.empty() && !args.empty()) {
    page.error = "?args= are a lesson's options: add ?lesson=NAME (e.g. ?lesson=zero&args=...)";
    show_classroom(page.params);
    return;
  }
  if (!lesson.empty()) {
    start_lesson(lesson, args);
    return;
  }
  std::string versus_error;  // kept past the settings' (which clear the line when they are good)
  if (!versus.empty() && set_versus(versus) != 0) versus_error = page.error;
  if (!series.empty()) {  // the series' first value over the URL's others: one run
    if (auto error = mgpu::lessons::apply_settings(page.params, settings)) page.error = *error;
    start_series(series);
  } else if (show_settings(settings, page.params) != 0) {
    show_classroom(page.params);
  }
  if (!page.dashboard) show_classroom(page.params);
  if (!versus_error.empty() && page.error.empty()) page.error = versus_error;
}

}  // namespace

int main(int argc, char** argv) {
  // A lesson's report goes to a panel, not a terminal (which emscripten's stdout claims to be):
  // plain text, as natively when the output is not a terminal.
  setenv("NO_COLOR", "1", 1);
  if (!glfwInit()) return 1;
  page.window = glfwCreateWindow(1600, 900, "mgpu-lab classroom", nullptr, nullptr);
  glfwMakeContextCurrent(page.window);
  ImGui::CreateContext();
  mgpu::viz::setup_imgui(false);
  ImGui_ImplGlfw_InitForOpenGL(page.window, true);
  ImGui_ImplOpenGL3_Init("#version 300 es");
  open_from_url(argc, argv);
  emscripten_set_main_loop(frame, 0, true);
  return 0;
}
