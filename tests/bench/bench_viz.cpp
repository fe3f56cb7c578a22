// Dashboard frame cost: the CPU time to build one frame's draw lists (ImGui calls, no GL, no
// vsync) for a ~200k-event pipeline trace, against an empty trace. Culling (binary search of the
// visible range) and merging (sub-pixel events into dense blocks) keep the big trace cheap.
//   ./build/bench_viz
#include <chrono>
#include <cstdio>

#include <imgui.h>

#include "viz/dashboard.h"
#include "viz/synthetic.h"

using namespace mgpu;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  double ms_per_frame = 0;
  int vertices = 0;
};

// Builds `frames` frames of the dashboard, after a few warm-up frames; `setup` may zoom.
template <typename Setup>
Result time_frames(viz::Dashboard& dashboard, int frames, Setup setup) {
  ImGuiIO& io = ImGui::GetIO();
  auto one_frame = [&] {
    io.DisplaySize = {1600, 900};
    io.DeltaTime = 1.0f / 60.0f;
    ImGui::NewFrame();
    dashboard.frame(1600, 900);
    ImGui::Render();
  };
  for (int i = 0; i < 3; ++i) one_frame();
  setup();
  one_frame();
  const auto t0 = Clock::now();
  for (int i = 0; i < frames; ++i) one_frame();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return {1e3 * seconds / frames, ImGui::GetDrawData()->TotalVtxCount};
}

}  // namespace

int main() {
  ImGui::CreateContext();
  viz::setup_imgui(false);
  // As the OpenGL 3 renderer does: draw lists may exceed 64k vertices (split by vertex offset).
  ImGui::GetIO().BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;
  unsigned char* pixels = nullptr;
  int w = 0, h = 0;
  ImGui::GetIO().Fonts->GetTexDataAsRGBA32(&pixels, &w, &h);  // a built atlas, no GPU texture

  viz::testing::PipelineSpec big;
  big.stages = 8;
  big.microbatches = 4546;  // 2*P*M compute + 4*(P-1)*M send/recv events = ~200k
  viz::DashboardOptions options;
  options.traces.push_back(viz::testing::synthetic_pipeline(big));
  const size_t n_events = options.traces[0].events.size();
  const size_t n_counters = options.traces[0].counters.size();
  const auto t0 = Clock::now();
  viz::Dashboard big_dashboard(std::move(options));
  const double index_s = std::chrono::duration<double>(Clock::now() - t0).count();

  viz::DashboardOptions empty_options;
  empty_options.traces.push_back(trace::Trace{});
  viz::Dashboard empty_dashboard(empty_options);

  const int frames = 100;
  const Result empty = time_frames(empty_dashboard, frames, [] {});
  const Result full = time_frames(big_dashboard, frames, [] {});
  // Zoomed in to ~1/1000 of the run: only a few cells are on screen.
  const Result zoomed = time_frames(big_dashboard, frames, [&] {
    viz::TimeAxis& axis = const_cast<viz::TimeAxis&>(big_dashboard.axis());
    axis.zoom(1000, axis.x0 + axis.width / 2);
  });

  // Back to the whole run, with the pipeline's send/recv group highlighted (drawn over the rest).
  const Result highlighted = time_frames(big_dashboard, frames, [&] {
    big_dashboard.fit();
    big_dashboard.highlight("pp");
  });

  std::printf("bench_viz: frame CPU time (build draw lists, 1600x900, %d frames)\n", frames);
  std::printf("  trace: %zu events, %zu memory samples, 8 ranks (indexing took %.0f ms)\n",
              n_events, n_counters, index_s * 1e3);
  std::printf("  empty trace            : %8.3f ms/frame  (%d vertices)\n", empty.ms_per_frame,
              empty.vertices);
  std::printf("  200k events, fit       : %8.3f ms/frame  (%d vertices)  ratio %.1fx\n",
              full.ms_per_frame, full.vertices, full.ms_per_frame / empty.ms_per_frame);
  std::printf("  200k events, zoom 1000x: %8.3f ms/frame  (%d vertices)  ratio %.1fx\n",
              zoomed.ms_per_frame, zoomed.vertices, zoomed.ms_per_frame / empty.ms_per_frame);
  std::printf(
      "  200k events, fit, group \"pp\" (%zu events) highlighted: %8.3f ms/frame  (%d "
      "vertices)  ratio %.1fx\n",
      big_dashboard.views()[0].group_events("pp").size(), highlighted.ms_per_frame,
      highlighted.vertices, highlighted.ms_per_frame / empty.ms_per_frame);
  ImGui::DestroyContext();
  return 0;
}
