// The dashboard frame (header, classroom controls, timelines, memory, summary) and the two ways
// to show it: an interactive GLFW window, or a hidden one rendered into a PNG.
#include "viz/dashboard.h"

#include "core/trace/analysis.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <thread>

#include <fmt/format.h>

// Framebuffer objects (GL 3.0) for the offscreen screenshot: GLFW includes GL/gl.h, which
// includes GL/glext.h with prototypes when this is defined.
#define GL_GLEXT_PROTOTYPES
#include <GLFW/glfw3.h>

#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <imgui_internal.h>

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION  // the one definition in mgpu_viz
#include <stb_image_write.h>

#include "core/runtime/input_file.h"
#include "core/runtime/output_file.h"

#if __has_include("core/trace/chrome_trace.h")
#include "core/trace/chrome_trace.h"
#define MGPU_VIZ_HAVE_READER 1
#endif

#include "viz/panels.h"

namespace mgpu::viz {

namespace {
constexpr const char* kNoDisplay = "cannot open a display: run under xvfb-run -a or set DISPLAY";
constexpr float kPresentationScale = 1.6f;
constexpr float kFontSize = 15.0f;
constexpr size_t kMaxCompared = 4;              // stacked views that still fit a screen
constexpr float kMemoryStripHeight = 40.0f;     // per rank: the peak label and 6 bands fit
constexpr float kCompareStripHeight = 56.0f;    // compared runs: every band a few pixels at least
constexpr float kProjectorStripHeight = 28.0f;  // presentation, runs side by side
constexpr const char* kFontFile = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

float ui_scale(bool presentation) {
  return presentation ? kPresentationScale : 1.0f;
}

// Continues the row when an item `width` pixels wide still fits after `spacing`; false (and the
// cursor stays on a new row) when it does not.
bool fits_on_this_row(float width, float spacing) {
  const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  ImGui::SameLine(0, spacing);
  if (ImGui::GetCursorScreenPos().x + width <= right) return true;
  ImGui::NewLine();
  return false;
}
}  // namespace

// ---- ImGui setup
// ---------------------------------------------------------------------------------

void setup_imgui(bool presentation) {
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // no imgui.ini: every run starts the same
  io.LogFilename = nullptr;
  // Two fixed fonts: normal and presentation size, rasterised at their size (crisp on a projector).
  // DejaVu Sans when installed (Debian), else ImGui's built-in font scaled.
  if (io.Fonts->Fonts.empty()) {
    for (float size : {kFontSize, kFontSize * kPresentationScale}) {
      if (std::filesystem::exists(kFontFile)) {
        io.Fonts->AddFontFromFileTTF(kFontFile, size);
      } else {
        ImFontConfig cfg;
        cfg.SizePixels = std::round(13 * size / kFontSize);
        io.Fonts->AddFontDefault(&cfg);
      }
    }
    io.Fonts->Build();
  }
  presentation ? ImGui::StyleColorsLight() : ImGui::StyleColorsDark();
  ImGuiStyle& style = ImGui::GetStyle();
  style.WindowRounding = 0;
  style.WindowBorderSize = 0;
}

// ---- the dashboard
// -------------------------------------------------------------------------------

Dashboard::Dashboard(DashboardOptions options) : options_(std::move(options)) {
  for (trace::Trace& t : options_.traces) views_.emplace_back(std::move(t));
  options_.traces.clear();  // the views own the traces now
  layouts_.resize(views_.size());
  if (views_.empty() && options_.rerun) rerun_with_current_params(options_.rerun->params);
  highlight(options_.highlight);
}

std::vector<std::string> Dashboard::comm_groups() const {
  std::set<std::string> all;
  for (const TraceView& v : views_) all.insert(v.comm_groups().begin(), v.comm_groups().end());
  return {all.begin(), all.end()};
}

bool Dashboard::highlight(const std::string& group) {
  const std::vector<std::string> groups = comm_groups();
  if (!group.empty() && !std::binary_search(groups.begin(), groups.end(), group)) return false;
  highlight_ = group;
  return true;
}

void Dashboard::select(int view, int event) {
  selected_view_ = view;
  selected_event_ = event;
  partners_ = (view >= 0 && event >= 0) ? views_[view].partners(event) : std::vector<int>{};
}

void Dashboard::draw_header() {
  ImGui::TextUnformatted(options_.title.c_str());
  ImGui::SameLine(0, 24);
  if (ImGui::Button("Fit")) fit();
  ImGui::SameLine();
  if (ImGui::Button("Last step")) fit_last_step();
  ImGui::SameLine();
  bool presentation = options_.presentation;
  if (ImGui::Checkbox("Presentation", &presentation)) {
    options_.presentation = presentation;
    setup_imgui(presentation);
  }
  draw_group_control();
  ImGui::SameLine(0, 24);
  ImGui::Checkbox("model states only", &options_.model_states_only);
  // The hint only where the row has room for it (presentation fonts would push it off the edge).
  const char* hint = "wheel: zoom   drag: pan   click: select (partners highlighted)";
  if (fits_on_this_row(ImGui::CalcTextSize(hint).x, 24)) ImGui::TextDisabled("%s", hint);
}

// A combo box of the traces' communication groups: the one picked is highlighted.
void Dashboard::draw_group_control() {
  const std::vector<std::string> groups = comm_groups();
  if (groups.empty()) return;
  ImGui::SameLine(0, 24);
  ImGui::SetNextItemWidth(80 * ui_scale(options_.presentation));
  if (ImGui::BeginCombo("highlight", highlight_.empty() ? "(none)" : highlight_.c_str())) {
    if (ImGui::Selectable("(none)", highlight_.empty())) highlight("");
    for (const std::string& g : groups)
      if (ImGui::Selectable(g.c_str(), g == highlight_)) highlight(g);
    ImGui::EndCombo();
  }
}

void Dashboard::draw_classroom_controls() {
  if (!options_.rerun || !options_.rerun->params.is_array()) return;
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
      int v = spec.value("value", 0);
      if (ImGui::SliderInt(name.c_str(), &v, spec.value("min", 0), spec.value("max", 100))) {
        spec["value"] = v;
        changed = true;
      }
    }
  }
  const char* idle_hint = "(classroom: change a value to re-run)";
  if (!rerun_error_.empty()) {
    ImGui::NewLine();
    ImGui::TextColored({1, 0.3f, 0.3f, 1}, "%s", rerun_error_.c_str());
  } else if (fits_on_this_row(ImGui::CalcTextSize(idle_hint).x, 20)) {
    ImGui::TextDisabled("%s", idle_hint);
  }
  if (changed) rerun_with_current_params(before);
}

namespace {
// The last step of a trace with more than one, or none.
std::optional<int> last_of_several_steps(const trace::Trace& t) {
  std::set<int> steps;
  for (const trace::Event& e : t.events)
    if (e.lane == trace::Lane::step && e.step >= 0) steps.insert(e.step);
  if (steps.size() < 2) return std::nullopt;
  return *steps.rbegin();
}

// The time a view's ruler calls 0: the start of the step its summary describes, else of its run.
double shown_start(const TraceView& v) {
  if (const auto step = v.summary_step()) return trace::analysis_window(v.trace(), *step).begin;
  return v.run_start();
}

// Empty when the window shows part of some trace's shown step; else why not, in one line.
std::string zoom_outside_traces(const TimeWindow& zoom, const std::vector<trace::Trace>& traces) {
  double longest = 0;  // the ruler runs from the shown step's start to the run's end
  for (const trace::Trace& t : traces) {
    const TraceView view(t);
    longest = std::max(longest, view.run_end() - shown_start(view));
  }
  if (zoom.from < longest) return {};
  return fmt::format("--zoom starts at {} but the shown step ends at {} on the ruler; pick a "
                     "window inside 0..{}",
                     format_duration(zoom.from), format_duration(longest),
                     format_duration(longest));
}
}  // namespace

TimeAxis Dashboard::axis(int view) const {
  TimeAxis a = axis_;
  if (view < 0 || view >= static_cast<int>(view_origin_.size())) return a;
  if (view < static_cast<int>(view_x0_.size())) a.x0 = view_x0_[view];  // its column
  const double shift = view_origin_[view] - axis_.origin;
  a.t0 += shift;
  a.t1 += shift;
  a.origin = view_origin_[view];
  return a;
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

void Dashboard::rerun_with_current_params(const nlohmann::json& previous_params) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& spec : options_.rerun->params) {
    if (spec.contains("name") && spec.contains("value"))
      values[spec["name"].get<std::string>()] = spec["value"];
  }
  try {
    const RerunHook& hook = *options_.rerun;
    std::vector<TraceView> runs;
    std::vector<std::string> labels;
    if (hook.split_by.empty()) {
      runs.emplace_back(hook.run(values));
      labels = options_.labels;
    }
    for (const std::string& value :
         hook.split_by.empty() ? std::vector<std::string>{} : hook.split_values) {
      values[hook.split_by] = value;
      runs.emplace_back(hook.run(values));
      labels.push_back(hook.split_by + " " + value);
    }
    // Views past the re-run ones (a compare's other traces) stay.
    for (size_t v = runs.size(); v < views_.size(); ++v) runs.push_back(std::move(views_[v]));
    views_ = std::move(runs);
    options_.labels = std::move(labels);
    layouts_.resize(views_.size());
    rerun_error_.clear();
    select(-1, -1);
    if (!highlight(highlight_)) highlight("");  // the new run may not have that group
    fit();
  } catch (const std::exception& e) {
    rerun_error_ = std::string("re-run failed: ") + e.what();
    options_.rerun->params = previous_params;  // the controls show what is on screen
  }
}

void Dashboard::frame(float display_w, float display_h) {
  const bool presentation = options_.presentation;
  const float scale = ui_scale(presentation);
  ImGuiIO& io = ImGui::GetIO();
  const bool big_font = presentation && io.Fonts->Fonts.Size > 1;
  if (big_font) ImGui::PushFont(io.Fonts->Fonts[1]);

  ImGui::SetNextWindowPos({0, 0});
  ImGui::SetNextWindowSize({display_w, display_h});
  ImGui::Begin("##mgpu-dashboard", nullptr,
               ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoMove |
                   ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_NoSavedSettings |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  draw_header();
  const Palette& pal = palette(presentation);
  // The label column fits the widest row label ("GPU 5  dp1 pp0 tp1" on a mesh).
  float label_width = ImGui::CalcTextSize("GPU 00").x;
  for (const TraceView& v : views_)
    for (int r = 0; r < v.num_ranks(); ++r)
      label_width = std::max(label_width, ImGui::CalcTextSize(v.rank_label(r).c_str()).x);
  label_width += 16 * scale;
  PanelContext ctx{pal, axis_, label_width, scale};
  draw_legend(ctx, std::any_of(views_.begin(), views_.end(),
                               [](const TraceView& v) { return v.is_pipeline(); }));
  draw_classroom_controls();
  if (!options_.error.empty()) {
    ImGui::Spacing();
    ImGui::TextColored({1, 0.3f, 0.3f, 1}, "%s", options_.error.c_str());
  }
  if (views_.empty()) {
    if (options_.error.empty()) ImGui::TextDisabled("(no trace)");
    ImGui::End();
    if (big_font) ImGui::PopFont();
    return;
  }

  const float content_x = ImGui::GetCursorScreenPos().x;
  const float right_margin = 8 * scale + ImGui::GetStyle().ScrollbarSize;
  const float content_w = ImGui::GetContentRegionAvail().x - right_margin;
  const bool columns = views_.size() > 1 && options_.layout == CompareLayout::columns;
  // Side by side, each run gets a column; in rows, every run spans the width right of the labels.
  const float column_gap = 24 * scale;
  const float column_w =
      columns ? (content_w - column_gap * (views_.size() - 1)) / views_.size() : content_w;
  view_x0_.assign(views_.size(), content_x + label_width);
  for (size_t v = 0; columns && v < views_.size(); ++v)
    view_x0_[v] = content_x + v * (column_w + column_gap) + label_width;
  axis_.x0 = view_x0_[0];
  axis_.width = std::max(50.0f, column_w - label_width);
  fit_axis_if_pending();
  if (columns) {
    ImGui::Separator();
    draw_memory_legend(ctx);
  }
  const float top = ImGui::GetCursorScreenPos().y;
  float bottom = top;
  for (size_t v = 0; v < views_.size(); ++v) {
    if (columns) ImGui::SetCursorScreenPos({view_x0_[v] - label_width, top});
    ImGui::BeginGroup();
    draw_view(static_cast<int>(v), label_width, columns ? column_w : 0);
    if (columns) {
      PanelContext column_ctx = ctx;
      column_ctx.column_width = column_w;
      draw_view_summary(static_cast<int>(v), column_ctx);
    }
    ImGui::EndGroup();
    bottom = std::max(bottom, ImGui::GetItemRectMax().y);
  }
  if (columns) {
    ImGui::SetCursorScreenPos({content_x, bottom});
    ImGui::Dummy({1, 1});
  } else {
    ImGui::Separator();
    for (size_t v = 0; v < views_.size(); ++v) {
      if (v % 2 == 1) ImGui::SameLine(0, 40 * scale);  // two summaries a row
      ImGui::BeginGroup();
      draw_view_summary(static_cast<int>(v), ctx);
      ImGui::EndGroup();
    }
  }
  content_height_ = ImGui::GetCursorPosY() + ImGui::GetStyle().WindowPadding.y;
  ImGui::End();
  if (big_font) ImGui::PopFont();
}

void Dashboard::fit_axis_if_pending() {
  if (!fit_pending_) return;
  // Each view's ruler reads 0 at the start of the step its summary describes (the last one of a
  // multi-step run), else at the start of its run; compare mode lines the views up there.
  view_origin_.clear();
  for (const TraceView& v : views_) view_origin_.push_back(shown_start(v));
  double start = DBL_MAX, end = -DBL_MAX;  // relative to each view's origin
  for (size_t v = 0; v < views_.size(); ++v) {
    double s = views_[v].run_start(), e = views_[v].run_end();
    // Steps are alike; one fills the width readably where twenty would be a blur.
    if (fit_last_step_pending_) {
      if (const auto step = last_of_several_steps(views_[v].trace())) {
        const trace::Interval w = trace::analysis_window(views_[v].trace(), *step);
        s = w.begin;
        e = w.end;
      }
    }
    start = std::min(start, s - view_origin_[v]);
    end = std::max(end, e - view_origin_[v]);
  }
  // The left edge is the shown step's first event (no margin showing the previous step's tail);
  // a little room on the right for the last cell's border.
  const bool zoomed = options_.zoom && zoom_pending_;  // exactly the asked window, no margin
  if (zoomed) {
    start = options_.zoom->from;
    end = options_.zoom->to;
  }
  zoom_pending_ = false;
  axis_.fit(start + view_origin_[0], end + view_origin_[0], zoomed ? 0.0 : 0.01);
  axis_.t0 = start + view_origin_[0];
  axis_.origin = view_origin_[0];
  fit_pending_ = false;
  fit_last_step_pending_ = false;
}

void Dashboard::draw_view(int v, float label_width, float column_w) {
  const float scale = ui_scale(options_.presentation);
  const Palette& pal = palette(options_.presentation);
  ImGui::Separator();
  if (views_.size() > 1 || v < static_cast<int>(options_.labels.size())) {
    ImGui::TextUnformatted(v < static_cast<int>(options_.labels.size()) ? options_.labels[v].c_str()
                                                                        : "trace");
    ImGui::SameLine(0, 16 * scale);
  }
  // The run's line, when it fits its column (a column's label already names what differs).
  const std::string run = describe_run(views_[v]);
  if (column_w <= 0 || ImGui::GetCursorScreenPos().x + ImGui::CalcTextSize(run.c_str()).x <=
                           view_x0_[v] - label_width + column_w)
    ImGui::TextDisabled("%s", run.c_str());
  else
    ImGui::NewLine();
  // This view's axis; a zoom or pan on it is carried back to the shared one.
  TimeAxis view_axis = axis(v);
  PanelContext view_ctx{pal, view_axis, label_width, scale};
  draw_ruler(view_ctx);
  Selection sel{selected_view_, selected_event_, &partners_, highlight_};
  const int c = draw_timeline(view_ctx, views_[v], v, sel, layouts_[v]);
  ImGui::SetItemUsingMouseWheel();  // the wheel zooms the timeline instead of scrolling
  if (c != -2) select(c >= 0 ? v : -1, c);
  if (column_w <= 0) draw_memory_legend(view_ctx);  // columns: one legend above them
  // One memory scale for every view, so compared runs' strips compare by height; compared runs
  // get taller strips so the smaller run's bands (ZeRO-3's quarter states) stay visible.
  const bool states = options_.model_states_only;
  int64_t shared_memory_max = 0;
  for (const TraceView& w : views_)
    shared_memory_max = std::max(shared_memory_max, states ? max_model_states(w) : w.max_memory());
  // A projector shows two runs side by side at 1920x1080: lower strips there (the peak label fits).
  const float strip = options_.presentation && column_w > 0 ? kProjectorStripHeight
                      : views_.size() > 1                   ? kCompareStripHeight
                                                            : kMemoryStripHeight;
  draw_memory(view_ctx, views_[v], strip, shared_memory_max, states);
  const double shift = view_axis.origin - axis_.origin;
  axis_.t0 = view_axis.t0 - shift;
  axis_.t1 = view_axis.t1 - shift;
}

void Dashboard::draw_view_summary(int v, const PanelContext& ctx) {
  if (views_.size() > 1) {
    ImGui::TextUnformatted(v < static_cast<int>(options_.labels.size()) ? options_.labels[v].c_str()
                                                                        : "trace");
  }
  draw_summary(ctx, views_[v], "summary" + std::to_string(v));
}

// ---- windows
// -------------------------------------------------------------------------------------

namespace {

// GLFW's last error, for the one-line message when no display or window can be had.
std::string& glfw_last_error() {
  static std::string last;
  return last;
}

void report_no_display() {
  std::fprintf(stderr, "%s%s%s\n", kNoDisplay, glfw_last_error().empty() ? "" : " (GLFW: ",
               glfw_last_error().empty() ? "" : (glfw_last_error() + ")").c_str());
}

// RAII for GLFW, a window with a current GL context, and an ImGui context with its GL renderer.
struct GlfwSession {
  bool ok = false;
  GlfwSession() {
    glfw_last_error().clear();
    glfwSetErrorCallback([](int, const char* description) { glfw_last_error() = description; });
    // An X server resets when its last client disconnects (Xvfb under xvfb-run does), and refuses
    // connections for a moment while it does: with a DISPLAY set, try again for up to 2 seconds.
    for (int attempt = 0; attempt < 20; ++attempt) {
      ok = glfwInit() == GLFW_TRUE;
      if (ok || !std::getenv("DISPLAY")) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~GlfwSession() {
    if (ok) glfwTerminate();
  }
};
struct WindowDeleter {
  void operator()(GLFWwindow* w) const { glfwDestroyWindow(w); }
};
using WindowPtr = std::unique_ptr<GLFWwindow, WindowDeleter>;

struct ImGuiSession {
  bool with_glfw_input;
  ImGuiSession(GLFWwindow* window, bool presentation, bool install_input)
      : with_glfw_input(install_input) {
    ImGui::CreateContext();
    setup_imgui(presentation);
    if (with_glfw_input) ImGui_ImplGlfw_InitForOpenGL(window, true);
    ImGui_ImplOpenGL3_Init("#version 130");
  }
  ~ImGuiSession() {
    ImGui_ImplOpenGL3_Shutdown();
    if (with_glfw_input) ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
  }
  ImGuiSession(const ImGuiSession&) = delete;
  ImGuiSession& operator=(const ImGuiSession&) = delete;
};

WindowPtr open_window(int width, int height, const std::string& title, bool visible) {
  glfwWindowHint(GLFW_VISIBLE, visible ? GLFW_TRUE : GLFW_FALSE);
  WindowPtr w(glfwCreateWindow(width, height, title.c_str(), nullptr, nullptr));
  if (w) glfwMakeContextCurrent(w.get());
  return w;
}

void clear(bool presentation, int width, int height) {
  glViewport(0, 0, width, height);
  presentation ? glClearColor(1, 1, 1, 1) : glClearColor(0.06f, 0.06f, 0.07f, 1);
  glClear(GL_COLOR_BUFFER_BIT);
}

// An offscreen colour buffer of exactly width x height, independent of the window's size.
struct Framebuffer {
  GLuint fbo = 0, colour = 0;
  Framebuffer(int width, int height) {
    glGenFramebuffers(1, &fbo);
    glGenRenderbuffers(1, &colour);
    glBindRenderbuffer(GL_RENDERBUFFER, colour);
    glRenderbufferStorage(GL_RENDERBUFFER, GL_RGBA8, width, height);
    glBindFramebuffer(GL_FRAMEBUFFER, fbo);
    glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER, colour);
  }
  bool complete() const {
    return glCheckFramebufferStatus(GL_FRAMEBUFFER) == GL_FRAMEBUFFER_COMPLETE;
  }
  ~Framebuffer() {
    glBindFramebuffer(GL_FRAMEBUFFER, 0);
    glDeleteRenderbuffers(1, &colour);
    glDeleteFramebuffers(1, &fbo);
  }
  Framebuffer(const Framebuffer&) = delete;
  Framebuffer& operator=(const Framebuffer&) = delete;
};

constexpr int kMeasureHeight = 1000;
constexpr int kMinHeight = 200, kMaxHeight = 8192;

int fitted_height(const Dashboard& dashboard) {
  return std::clamp(static_cast<int>(std::ceil(dashboard.content_height())), kMinHeight,
                    kMaxHeight);
}

// A few headless frames at width x height (ImGui sizes tables and auto-fit items over the first).
void render_frames(Dashboard& dashboard, int width, int height) {
  ImGuiIO& io = ImGui::GetIO();
  constexpr int kFrames = 3;
  for (int f = 0; f < kFrames; ++f) {
    io.DisplaySize = {static_cast<float>(width), static_cast<float>(height)};
    io.DisplayFramebufferScale = {1, 1};
    io.DeltaTime = 1.0f / 60.0f;
    io.MousePos = {-FLT_MAX, -FLT_MAX};
    ImGui_ImplOpenGL3_NewFrame();
    ImGui::NewFrame();
    dashboard.frame(static_cast<float>(width), static_cast<float>(height));
    ImGui::Render();
    clear(dashboard.options().presentation, width, height);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  }
}

// The window grows (or shrinks) to the content's height once its first frames are laid out, within
// the monitor's work area.
void fit_window_to_content(GLFWwindow* window, const Dashboard& dashboard) {
  int width = 0, height = 0, x = 0, y = 0, work_w = 0, work_h = 0;
  glfwGetWindowSize(window, &width, &height);
  if (GLFWmonitor* monitor = glfwGetPrimaryMonitor())
    glfwGetMonitorWorkarea(monitor, &x, &y, &work_w, &work_h);
  int wanted = fitted_height(dashboard);
  if (work_h > 0) wanted = std::min(wanted, work_h);
  if (wanted != height) glfwSetWindowSize(window, width, wanted);
}

}  // namespace

int run_dashboard(const DashboardOptions& options) {
  GlfwSession glfw;
  if (!glfw.ok) {
    report_no_display();
    return 2;
  }
  WindowPtr window = open_window(options.width, kMeasureHeight, options.title, true);
  if (!window) {
    report_no_display();
    return 2;
  }
  glfwSwapInterval(1);
  ImGuiSession imgui(window.get(), options.presentation, true);
  Dashboard dashboard(options);
  for (int frame = 0; !glfwWindowShouldClose(window.get()); ++frame) {
    if (options.max_frames > 0 && frame >= options.max_frames) break;
    glfwPollEvents();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    const ImVec2 size = ImGui::GetIO().DisplaySize;
    dashboard.frame(size.x, size.y);
    ImGui::Render();
    int fw = 0, fh = 0;
    glfwGetFramebufferSize(window.get(), &fw, &fh);
    clear(dashboard.options().presentation, fw, fh);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    glfwSwapBuffers(window.get());
    if (frame == 2) fit_window_to_content(window.get(), dashboard);
  }
  return 0;
}

int render_screenshot(Dashboard& dashboard, const std::string& png_path, int width, int height) {
  GlfwSession glfw;
  if (!glfw.ok) {
    report_no_display();
    return 2;
  }
  WindowPtr window = open_window(width, std::max(height, kMinHeight), "mgpu screenshot", false);
  if (!window) {
    report_no_display();
    return 2;
  }
  // No GLFW input backend: the mouse is nowhere and time does not pass, so frames are reproducible.
  ImGuiSession imgui(window.get(), dashboard.options().presentation, false);
  if (height <= 0) {  // as tall as the content: lay it out once at this width and measure
    render_frames(dashboard, width, kMeasureHeight);
    height = fitted_height(dashboard);
  }
  Framebuffer fb(width, height);
  if (!fb.complete()) {
    std::fprintf(stderr, "cannot create a %dx%d offscreen framebuffer\n", width, height);
    return 2;
  }
  render_frames(dashboard, width, height);
  glFinish();
  std::vector<unsigned char> pixels(static_cast<size_t>(width) * height * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
  // OpenGL's origin is bottom-left, PNG's top-left: flip, and make every pixel opaque.
  std::vector<unsigned char> png(pixels.size());
  const size_t row = static_cast<size_t>(width) * 4;
  for (int y = 0; y < height; ++y) {
    std::copy_n(&pixels[(height - 1 - y) * row], row, &png[y * row]);
  }
  for (size_t i = 3; i < png.size(); i += 4) png[i] = 255;
  // Encoded in memory, then written through a temporary file renamed into place (output_file.h):
  // the path is checked again now, and a failed write (disk full) is an error, not a half PNG.
  std::string encoded;
  const auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), size);
  };
  if (!stbi_write_png_to_func(append, &encoded, width, height, 4, png.data(),
                              static_cast<int>(row))) {
    std::fprintf(stderr, "mgpu viz: error: cannot encode the %dx%d screenshot\n", width, height);
    return 1;
  }
  try {
    write_file_atomically(png_path, "--screenshot", [&](std::FILE* file) {
      std::fwrite(encoded.data(), 1, encoded.size(), file);  // ferror checked by the helper
    });
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "mgpu viz: error: %s\n", e.what());
    return 2;
  }
  return 0;
}

int render_screenshot(const DashboardOptions& options, const std::string& png_path, int width,
                      int height) {
  Dashboard dashboard(options);
  return render_screenshot(dashboard, png_path, width, height);
}

// ---- loading and the command line
// ----------------------------------------------------------------

LoadedTrace load_trace_or_error(const std::string& path) {
  LoadedTrace out;
#ifdef MGPU_VIZ_HAVE_READER
  try {
    out.trace = trace::read_chrome_trace(path);
  } catch (const std::exception& e) {
    out.error = e.what();  // TraceFormatError names the file and what is wrong with it
  }
#else
  out.error =
      echo_input(path, 120) + ": this build has no trace reader (core/trace/chrome_trace.h)";
#endif
  std::replace(out.error.begin(), out.error.end(), '\n', ' ');  // always one line
  return out;
}

int viz_main(const std::vector<std::string>& trace_paths, const VizCliOptions& cli,
             std::ostream& err) {
  if (trace_paths.empty()) {
    err << "mgpu viz: give a trace file, e.g. mgpu run 1f1b --trace run.json\n";
    return 2;
  }
  if (cli.compare && (trace_paths.size() < 2 || trace_paths.size() > kMaxCompared)) {
    err << "mgpu viz: --compare takes two to " << kMaxCompared << " traces (got "
        << trace_paths.size() << ")\n";
    return 2;
  }
  if (!cli.compare && trace_paths.size() > 1) {
    err << "mgpu viz: one trace, or --compare A.json B.json (up to " << kMaxCompared << ")\n";
    return 2;
  }
  DashboardOptions options;
  options.presentation = cli.presentation;
  options.layout = cli.layout;
  options.model_states_only = cli.model_states_only;
  options.width = cli.width;
  options.title = cli.title.empty() ? "mgpu-lab" : cli.title;
  for (const std::string& path : trace_paths) {
    LoadedTrace loaded = load_trace_or_error(path);
    if (!loaded.trace) {
      if (!cli.screenshot.empty()) {
        err << "mgpu viz: " << loaded.error << "\n";
        return 2;
      }
      options.error += (options.error.empty() ? "" : "\n") + loaded.error;
      continue;
    }
    options.traces.push_back(std::move(*loaded.trace));
    options.labels.push_back(std::filesystem::path(path).filename().string());
  }
  if (!cli.highlight.empty()) {
    // Group names come from the events: index the traces once to list them.
    std::set<std::string> groups;
    for (const trace::Trace& t : options.traces)
      for (const trace::Event& e : t.events)
        if (!e.group.empty()) groups.insert(e.group);
    if (!groups.count(cli.highlight)) {
      std::string names;
      for (const std::string& g : groups) names += (names.empty() ? "" : ", ") + g;
      err << "mgpu viz: --highlight " << cli.highlight << ": no such communication group in "
          << (groups.empty() ? std::string("the trace (it has none)")
                             : "the trace; its groups: " + names)
          << "\n";
      return 2;
    }
    options.highlight = cli.highlight;
  }
  if (cli.zoom) {
    if (const std::string why = zoom_outside_traces(*cli.zoom, options.traces); !why.empty()) {
      err << "mgpu viz: " << why << "\n";
      return 2;
    }
    options.zoom = cli.zoom;
  }
  if (!cli.screenshot.empty()) {
    return render_screenshot(options, cli.screenshot, cli.width, cli.height);
  }
  return run_dashboard(options);
}

int viz_main(const std::vector<std::string>& trace_paths, const VizCliOptions& cli) {
  return viz_main(trace_paths, cli, std::cerr);
}

}  // namespace mgpu::viz
