// The classroom in a browser tab: the native dashboard's classroom mode (the pipeline lesson
// re-run in-process on rank pthreads, modeled clock) drawn by ImGui on a WebGL2 canvas.
// The page's URL parameters become arguments (web/shell.html): `--set NAME=V,...` and
// `--series NAME=A..B` as in `mgpu viz --set/--series`. JavaScript calls the exported mgpu_*
// functions: set values (what a slider does), step a series, open a dropped trace file, and
// read the state (figures, errors, a frame count the browser test polls for).
#include <emscripten/emscripten.h>

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <atomic>
#include <cstdio>
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
  page.dashboard = std::make_unique<Dashboard>(std::move(opt));
  page.params = params;
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
  const int width = EM_ASM_INT({ return window.innerWidth; });
  const int height = EM_ASM_INT({ return window.innerHeight; });
  int w = 0, h = 0;
  glfwGetWindowSize(page.window, &w, &h);
  if (w != width || h != height) glfwSetWindowSize(page.window, width, height);
  glfwPollEvents();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  ImGui::NewFrame();
  const ImVec2 size = ImGui::GetIO().DisplaySize;
  page.dashboard->fit_to_height(static_cast<int>(size.y));
  page.dashboard->frame(size.x, size.y);
  ImGui::Render();
  int fw = 0, fh = 0;
  glfwGetFramebufferSize(page.window, &fw, &fh);
  glViewport(0, 0, fw, fh);
  glClearColor(0.06f, 0.06f, 0.07f, 1);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  // A slider moved (a re-run) or a trace opened: new figures, printed as the native run prints.
  // (Not while a run is on its way: a new classroom has no views until its first one is shown.)
  std::string figures = mgpu::web::classroom_figures(page.dashboard->views());
  if (!page.dashboard->rerun_pending() && figures != page.figures) {
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

// {"generation", "frames", "error", "rerun_error", "figures", "running", "series"}: the page's
// state as JSON.
EMSCRIPTEN_KEEPALIVE const char* mgpu_status() {
  nlohmann::json s = {{"generation", page.generation},
                      {"frames", page.frames},
                      {"error", page.error},
                      {"rerun_error", page.dashboard ? page.dashboard->rerun_error() : ""},
                      {"figures", page.figures},
                      {"running", page.dashboard && page.dashboard->rerun_pending()},
                      {"series", nullptr}};
  if (page.series) {
    s["series"] = {{"name", page.series->name},
                   {"value", page.series->steps()[page.series_step]},
                   {"step", page.series_step + 1},
                   {"steps", page.series->steps().size()}};
  }
  page.status = s.dump();
  return page.status.c_str();
}

// "name=value,...": the native --set, over the defaults (one run). 0, or 2 and the line.
EMSCRIPTEN_KEEPALIVE int mgpu_set(const char* settings) {
  return show_settings(settings, mgpu::lessons::classroom_parameters());
}

// What moving one control does: that parameter re-runs the lesson (an error line on the page
// when the combination is refused, the controls back where they were). 0, 2 on a bad value, 3
// while the last change's run is still going.
EMSCRIPTEN_KEEPALIVE int mgpu_move(const char* name, const char* value) {
  if (page.dashboard->rerun_pending()) return 3;  // one run at a time: ask again when it is shown
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
  return 0;
}

}  // extern "C"

int main(int argc, char** argv) {
  std::string settings, series;
  for (int i = 1; i + 1 < argc; i += 2) {  // web/shell.html passes these two only
    const std::string flag = argv[i];
    if (flag == "--set") settings = argv[i + 1];
    if (flag == "--series") series = argv[i + 1];
  }
  if (!glfwInit()) return 1;
  page.window = glfwCreateWindow(1600, 900, "mgpu-lab classroom", nullptr, nullptr);
  glfwMakeContextCurrent(page.window);
  ImGui::CreateContext();
  mgpu::viz::setup_imgui(false);
  ImGui_ImplGlfw_InitForOpenGL(page.window, true);
  ImGui_ImplOpenGL3_Init("#version 300 es");
  // The URL's values, or (a bad one: its line on the page) the defaults.
  page.params = mgpu::lessons::classroom_parameters();
  if (!series.empty()) {  // the series' first value over the URL's others: one run
    if (auto error = mgpu::lessons::apply_settings(page.params, settings)) page.error = *error;
    start_series(series);
  } else if (show_settings(settings, page.params) != 0) {
    show_classroom(page.params);
  }
  if (!page.dashboard) show_classroom(page.params);
  emscripten_set_main_loop(frame, 0, true);
  return 0;
}
