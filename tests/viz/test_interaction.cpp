// The dashboard driven like a user would: mouse clicks, wheel and drags fed to ImGui, frames built
// without a window (no GL needed), and the interactive window opened for a few frames.
#include <catch2/catch.hpp>

#include <cmath>

#include <imgui.h>

#include "viz/dashboard.h"
#include "viz/synthetic.h"

namespace test_interaction {

using namespace mgpu;
using namespace mgpu::viz;
using trace::Lane;

namespace {

// An ImGui context with a built font atlas and no renderer: frames are draw lists only.
struct HeadlessImGui {
  HeadlessImGui() {
    ImGui::CreateContext();
    setup_imgui(false);
    unsigned char* pixels = nullptr;
    int w = 0, h = 0;
    ImGui::GetIO().Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);
    ImGui::GetIO().BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;
  }
  ~HeadlessImGui() { ImGui::DestroyContext(); }
  HeadlessImGui(const HeadlessImGui&) = delete;
  HeadlessImGui& operator=(const HeadlessImGui&) = delete;

  void frame(Dashboard& d, ImVec2 mouse, bool down, float wheel = 0) {
    ImGuiIO& io = ImGui::GetIO();
    io.DisplaySize = {1280, 720};
    io.DeltaTime = 1.0f / 60.0f;
    io.MousePos = mouse;
    io.MouseDown[0] = down;
    io.MouseWheel = wheel;
    ImGui::NewFrame();
    d.frame(1280, 720);
    ImGui::Render();
  }
  void click(Dashboard& d, ImVec2 at) {
    frame(d, at, false);
    frame(d, at, true);
    frame(d, at, false);
  }
};

ImVec2 centre_of(const Dashboard& d, const trace::Event& e) {
  const LaneLayout& l = d.layout(0);
  return {static_cast<float>(d.axis().to_px(e.start + e.dur / 2)),
          static_cast<float>(l.lane_top(e.rank, e.lane) + l.lane_height / 2)};
}

}  // namespace

TEST_CASE("click selects an event and its partner; wheel zooms; drag pans", "[viz]") {
  HeadlessImGui imgui;
  DashboardOptions options;
  options.traces.push_back(viz::testing::synthetic_pipeline({}));
  Dashboard d(options);
  const ImVec2 nowhere{-1e6f, -1e6f};
  imgui.frame(d, nowhere, false);
  imgui.frame(d, nowhere, false);
  const TraceView& view = d.views()[0];

  // Click the activation send of micro-batch 3 from GPU 0: its recv on GPU 1 is the partner.
  int send = -1;
  for (int i = 0; i < static_cast<int>(view.trace().events.size()); ++i) {
    const trace::Event& e = view.event(i);
    if (e.op == "send" && e.rank == 0 && e.peer == 1 && e.microbatch == 3) send = i;
  }
  REQUIRE(send >= 0);
  imgui.click(d, centre_of(d, view.event(send)));
  CHECK(d.selected_event() == send);
  REQUIRE(d.selected_partners().size() == 1);
  const trace::Event& recv = view.event(d.selected_partners()[0]);
  CHECK(recv.op == "recv");
  CHECK(recv.rank == 1);
  CHECK(recv.microbatch == 3);

  // Clicking a forward selects it (no partners); clicking empty space clears the selection.
  int fwd = -1;
  for (int i : view.lane_events(2, Lane::compute)) {
    if (view.event(i).cat == trace::cat::forward && fwd < 0) fwd = i;
  }
  imgui.click(d, centre_of(d, view.event(fwd)));
  CHECK(d.selected_event() == fwd);
  CHECK(d.selected_partners().empty());
  const Gap& bubble = view.idle_gaps(3)[0];
  imgui.click(d, {static_cast<float>(d.axis().to_px((bubble.start + bubble.end) / 2)),
                  static_cast<float>(d.layout(0).lane_top(3, Lane::compute) + 5)});
  CHECK(d.selected_event() == -1);

  // Wheel up over the timeline zooms in around the cursor.
  const ImVec2 c = centre_of(d, view.event(fwd));
  const ImVec2 over{std::floor(c.x), std::floor(c.y)};  // ImGui floors the mouse position
  const double span = d.axis().t1 - d.axis().t0;
  const double t_under = d.axis().to_time(over.x);
  imgui.frame(d, over, false, 1.0f);
  imgui.frame(d, over, false);
  CHECK(d.axis().t1 - d.axis().t0 == Approx(span / 1.25));
  CHECK(d.axis().to_time(over.x) == Approx(t_under));

  // Dragging right by 100 px shows earlier times.
  const double t0 = d.axis().t0, spp = d.axis().seconds_per_pixel();
  imgui.frame(d, over, true);
  for (int step = 1; step <= 10; ++step) imgui.frame(d, {over.x + 10 * step, over.y}, true);
  imgui.frame(d, {over.x + 100, over.y}, false);
  CHECK(d.axis().t0 == Approx(t0 - 100 * spp).epsilon(0.05));
  CHECK(d.selected_event() == -1);  // a drag is not a click: nothing got selected

  // Fit brings the whole run back.
  d.fit();
  imgui.frame(d, nowhere, false);
  CHECK(d.axis().to_px(view.run_start()) >= d.axis().x0);
  CHECK(d.axis().to_px(view.run_end()) <= d.axis().x0 + d.axis().width);
}

TEST_CASE("the interactive window opens, draws a few frames and closes", "[viz]") {
  DashboardOptions options;
  options.traces.push_back(viz::testing::synthetic_pipeline({}));
  options.max_frames = 5;
  CHECK(run_dashboard(options) == 0);
  options.presentation = true;
  CHECK(run_dashboard(options) == 0);
}

}  // namespace test_interaction
