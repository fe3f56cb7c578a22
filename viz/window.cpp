// The two ways to show the dashboard: an interactive GLFW window, or a hidden one rendered into a
// PNG (deterministic: fixed fonts, no input backend, no time passing).
#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

// Framebuffer objects (GL 3.0) for the offscreen screenshot: GLFW includes GL/gl.h, which
// includes GL/glext.h with prototypes when this is defined.
#define GL_GLEXT_PROTOTYPES
#include <GLFW/glfw3.h>

#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION  // the one definition in mgpu_viz
#include <stb_image_write.h>

#include "core/runtime/output_file.h"
#include "viz/dashboard.h"
#include "viz/ui.h"

namespace mgpu::viz {

namespace {
constexpr const char* kNoDisplay = "cannot open a display: run under xvfb-run -a or set DISPLAY";
constexpr float kFontSize = 15.0f;
constexpr const char* kFontFile = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
}  // namespace

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
// The default height follows the content, up to kMaxFittedHeight: tall enough for every figure
// the docs show (seven compared schedules), bounded for a trace of thousands of ranks, whose
// content would otherwise make an 8192-pixel picture. --height asks for more, up to 8192.
constexpr int kMinHeight = 200, kMaxFittedHeight = 4800;
constexpr int kProjectorHeight = 1080;

int fitted_height(const Dashboard& dashboard) {
  return std::clamp(static_cast<int>(std::ceil(dashboard.content_height())), kMinHeight,
                    kMaxFittedHeight);
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
#if GLFW_VERSION_MAJOR > 3 || (GLFW_VERSION_MAJOR == 3 && GLFW_VERSION_MINOR >= 3)
  if (GLFWmonitor* monitor = glfwGetPrimaryMonitor())
    glfwGetMonitorWorkarea(monitor, &x, &y, &work_w, &work_h);
#else  // GLFW 3.2 (emscripten's) has no work area: the height the content asks for
  (void)x, (void)y, (void)work_w;
#endif
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
    // The rows fit the window (once it has its height: the first frames measure the content).
    if (options.fit_height <= 0 && frame > 2) dashboard.fit_to_height(static_cast<int>(size.y));
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
  // The content fits the picture asked for; a presentation picture without a height, a 1080-row
  // projector (DashboardOptions::fit_height).
  dashboard.fit_to_height(height > 0                         ? height
                          : dashboard.options().presentation ? kProjectorHeight
                                                             : 0);
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

}  // namespace mgpu::viz
