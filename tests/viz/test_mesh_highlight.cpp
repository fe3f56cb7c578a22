// The dashboard on a device mesh (issue 17): rows labelled with mesh coordinates from the trace of
// a real hybrid run, and one communication group highlighted (its events at full colour, every
// other event dimmed), from the view model, a rendered PNG and `mgpu viz --highlight`.
// Run under xvfb-run -a (the screenshots need a display).
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include <unistd.h>

#include "core/trace/chrome_trace.h"
#include "unit/mgpu_cli.h"
#include "viz/dashboard.h"
#include "viz/panels.h"
#include "viz/png_image.h"
#include "viz/synthetic.h"

namespace test_mesh_highlight {

using namespace mgpu;
using namespace mgpu::viz;
using mgpu::testing::run_mgpu;
using mgpu::testing::with_tiny_model;
namespace fs = std::filesystem;

namespace {

// A scratch folder per process, removed at the end.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("mgpu_mesh_viz_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

// Runs a lesson with a tiny model and --trace; the trace as the dashboard reads it.
trace::Trace lesson_trace(std::vector<std::string> args, const std::string& path) {
  args.insert(args.end(), {"--trace", path});
  const auto run = run_mgpu(with_tiny_model(args));
  if (run.code != 0) FAIL(run.err);
  return trace::read_chrome_trace(path);
}

std::vector<std::string> hybrid_2x2x2() {
  return {"run", "hybrid", "--ranks", "8", "--tp", "2", "--pp", "2"};
}

ImU32 pixel(const std::string& png, double x, double y) {
  const viz::testing::Image image(png);
  return image.rgba.empty() ? 0 : image.at(x, y);
}

}  // namespace

TEST_CASE("a hybrid trace labels rows with mesh coordinates and traces without a mesh keep GPU r",
          "[viz][mesh]") {
  Scratch scratch;
  const TraceView hybrid(lesson_trace(hybrid_2x2x2(), scratch / "hybrid.json"));
  REQUIRE(hybrid.mesh());
  CHECK(hybrid.mesh()->dp == 2);
  CHECK(hybrid.mesh()->tp == 2);
  CHECK(hybrid.mesh()->pp == 2);
  CHECK(hybrid.mesh()->cp == 1);
  // tp fastest, then dp, then pp (core/parallel/mesh.h); only the axes > 1 are named.
  CHECK(hybrid.rank_label(0) == "GPU 0  dp0 pp0 tp0");
  CHECK(hybrid.rank_label(3) == "GPU 3  dp1 pp0 tp1");
  CHECK(hybrid.rank_label(5) == "GPU 5  dp0 pp1 tp1");
  CHECK(hybrid.rank_label(6) == "GPU 6  dp1 pp1 tp0");

  // The labels agree with the communication: the members of every tp group share dp and pp and
  // differ in tp; those of every pp group share dp and tp.
  for (const std::string& group : hybrid.comm_groups()) {
    const std::vector<int>& ranks = hybrid.group_ranks(group);
    CAPTURE(group);
    REQUIRE(ranks.size() == 2);
    const auto a = parallel::mesh_coords(*hybrid.mesh(), ranks[0]);
    const auto b = parallel::mesh_coords(*hybrid.mesh(), ranks[1]);
    const std::string axis = group.substr(0, 2);
    for (parallel::Axis x : parallel::kAxes) {
      const bool along = axis == parallel::axis_name(x);
      CHECK((a[static_cast<int>(x)] != b[static_cast<int>(x)]) == along);
    }
  }

  // One axis: tensor_parallel writes tp into its trace's config.
  const TraceView tp(lesson_trace({"run", "tensor_parallel", "--ranks", "2"}, scratch / "tp.json"));
  CHECK(tp.rank_label(1) == "GPU 1  tp1");

  // No mesh: a pipeline (its config names stages, not axes), and axes that do not multiply to
  // the trace's ranks.
  const TraceView pipeline(viz::testing::synthetic_pipeline({}));
  CHECK_FALSE(pipeline.mesh());
  CHECK(pipeline.rank_label(3) == "GPU 3");
  trace::Trace wrong = viz::testing::synthetic_pipeline({});  // 4 ranks
  wrong.metadata["config"]["tp"] = 2;
  wrong.metadata["config"]["dp"] = 4;
  const TraceView wrong_view(std::move(wrong));
  CHECK_FALSE(wrong_view.mesh());
  CHECK(wrong_view.rank_label(1) == "GPU 1");
  // Axes that are not whole numbers of ranks (hand-edited metadata) give no mesh, never a crash.
  for (const nlohmann::json& bad : {nlohmann::json("4"), nlohmann::json(-4), nlohmann::json(0),
                                    nlohmann::json(4.5), nlohmann::json(int64_t{1} << 40)}) {
    trace::Trace t = viz::testing::synthetic_pipeline({});
    t.metadata["config"]["tp"] = bad;
    CAPTURE(bad.dump());
    CHECK_FALSE(TraceView(std::move(t)).mesh());
  }
}

TEST_CASE("highlighting a group selects exactly its events and dims the rest", "[viz][mesh]") {
  Scratch scratch;
  const std::string path = scratch / "hybrid.json";
  trace::Trace t = lesson_trace(hybrid_2x2x2(), path);
  const TraceView view(t);
  const std::vector<std::string> expected = {"dp0", "dp1", "dp2", "dp3", "pp0", "pp1",
                                             "pp2", "pp3", "tp0", "tp1", "tp2", "tp3"};
  CHECK(view.comm_groups() == expected);

  std::set<int> tp1;
  for (int i = 0; i < static_cast<int>(t.events.size()); ++i)
    if (t.events[i].group == "tp1") tp1.insert(i);
  REQUIRE_FALSE(tp1.empty());
  const std::vector<int>& selected = view.group_events("tp1");
  CHECK(std::set<int>(selected.begin(), selected.end()) == tp1);
  CHECK(selected.size() == tp1.size());  // no event twice
  CHECK(view.group_ranks("tp1") == std::vector<int>{2, 3});
  for (int i = 0; i < static_cast<int>(t.events.size()); ++i)
    CHECK(view.in_group(i, "tp1") == (tp1.count(i) == 1));
  CHECK(view.group_events("nosuch").empty());

  DashboardOptions options;
  options.traces = {t};
  Dashboard d(options);
  CHECK(d.highlighted_group().empty());
  CHECK(d.highlight("tp1"));
  CHECK_FALSE(d.highlight("nosuch"));
  CHECK(d.highlighted_group() == "tp1");  // an unknown name changes nothing

  // In the picture: a tp1 all-reduce on GPU 2 keeps its colour inside the highlight outline, a
  // pp recv on GPU 0 is dimmed - and is not without the highlight. (Wide, so that the all-reduces
  // are many pixels wide.)
  const std::string png = scratch / "highlight.png";
  REQUIRE(render_screenshot(d, png, 4800, 1000) == 0);
  const TimeAxis axis = d.axis(0);
  const LaneLayout& layout = d.layout(0);
  // A point inside an event's cell: its middle, or for a cell with a label, near its start.
  auto inside = [&](int i, double at) {
    const trace::Event& e = t.events[i];
    return std::pair<double, double>{axis.to_px(e.start + at * e.dur),
                                     layout.lane_top(e.rank, e.lane) + layout.lane_height / 2};
  };
  auto widest_on_screen = [&](auto keep) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(t.events.size()); ++i) {
      const trace::Event& e = t.events[i];
      if (!keep(e) || e.start < axis.t0 || e.end() > axis.t1) continue;
      if (best < 0 || e.dur > t.events[best].dur) best = i;
    }
    return best;
  };
  const int member = widest_on_screen([](const trace::Event& e) {
    return e.group == "tp1" && e.rank == 2 && e.lane == trace::Lane::comm;
  });
  const int other = widest_on_screen(
      [](const trace::Event& e) { return e.group == "pp0" && e.rank == 0 && e.op == "recv"; });
  REQUIRE(member >= 0);
  REQUIRE(other >= 0);
  const Palette& pal = palette(false);
  const auto [mx, my] = inside(member, 0.5);
  const auto [ox, oy] = inside(other, 0.1);
  const ImU32 member_pixel = pixel(png, mx, my);
  CHECK(member_pixel == pal.comm);
  CHECK(pixel(png, ox, oy) == dimmed(pal.comm, pal.lane_background));

  CHECK(d.highlight(""));
  const std::string plain = scratch / "plain.png";
  REQUIRE(render_screenshot(d, plain, 4800, 1000) == 0);
  // Undimmed again: across the recv, its own colours (hatched where it waits for its partner, the
  // comm colour on the wire), and nowhere the dimmed one.
  int own = 0, dim = 0;
  for (double f = 0.02; f < 1; f += 0.02) {
    const auto [x, y] = inside(other, f);
    const ImU32 p = pixel(plain, x, y);
    own += p == pal.comm || p == pal.comm_wait;
    dim += p == dimmed(pal.comm, pal.lane_background);
  }
  CHECK(own > 10);
  CHECK(dim == 0);
}

TEST_CASE("mgpu viz --highlight takes a group of the trace and an unknown one exits 2 listing them",
          "[viz][mesh]") {
  Scratch scratch;
  const std::string path = scratch / "hybrid.json";
  lesson_trace(hybrid_2x2x2(), path);
  const std::string png = scratch / "out.png";

  const auto bad = run_mgpu({"viz", path, "--highlight", "nosuch", "--screenshot", png});
  CHECK(bad.code == 2);
  CHECK(mgpu::testing::count_lines(bad.err) == 1);
  CHECK(bad.err.find("nosuch") != std::string::npos);
  for (const char* group : {"dp0", "pp3", "tp0", "tp3"})
    CHECK(bad.err.find(group) != std::string::npos);
  CHECK_FALSE(fs::exists(png));

  // Classroom mode (no trace) has nothing to highlight: refused, not ignored.
  const auto classroom = run_mgpu({"viz", "--highlight", "tp1", "--screenshot", png});
  CHECK(classroom.code == 2);
  CHECK(mgpu::testing::count_lines(classroom.err) == 1);
  CHECK_FALSE(fs::exists(png));

  const auto good = run_mgpu({"viz", path, "--highlight", "tp1", "--screenshot", png});
  CHECK(good.code == 0);
  CHECK(fs::exists(png));
}

}  // namespace test_mesh_highlight
