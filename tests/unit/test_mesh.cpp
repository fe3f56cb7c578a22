// The device mesh: for every factorisation of 8 ranks into tp x cp x dp x pp, each rank's
// coordinates, each axis group (members, order, name) and the pipeline neighbours are what the
// tp-fastest layout says; bad meshes are one clear std::invalid_argument.
#include <catch2/catch.hpp>

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/parallel/mesh.h"
#include "core/world/world.h"

namespace test_mesh {

using namespace mgpu;
using namespace mgpu::parallel;

namespace {

// Catch2 is not thread-safe, even behind a lock: rank threads record what did not hold and the
// main thread asserts that nothing was recorded.
std::mutex failures_mutex;
std::vector<std::string> failures;
#define EXPECT_ON_RANK(...)                                                   \
  do {                                                                        \
    if (!(__VA_ARGS__)) {                                                     \
      std::lock_guard failures_lock(failures_mutex);                          \
      failures.push_back("rank " + std::to_string(me) + ": " + #__VA_ARGS__); \
    }                                                                         \
  } while (0)

std::vector<MeshShape> factorisations(int n) {
  std::vector<MeshShape> shapes;
  for (int tp = 1; tp <= n; ++tp)
    for (int cp = 1; cp <= n; ++cp)
      for (int dp = 1; dp <= n; ++dp)
        for (int pp = 1; pp <= n; ++pp)
          if (tp * cp * dp * pp == n) shapes.push_back({tp, cp, dp, pp});
  return shapes;
}
}  // namespace

TEST_CASE("a mesh over 8 ranks, for every factorisation", "[mesh]") {
  const auto shapes = factorisations(8);
  REQUIRE(shapes.size() == 20);  // ordered factorisations of 2^3 into 4 factors: C(6,3)
  World world(WorldOptions{.ranks = 8, .all_reduce = selected_all_reduce()});
  for (const MeshShape& shape : shapes) {
    INFO(shape.describe());
    std::mutex mutex;
    std::set<std::string> group_names;
    failures.clear();
    world.run([&](RankContext& ctx) {
      Mesh mesh(*ctx.comm, shape);
      const int me = ctx.rank;
      // tp varies fastest, then cp, dp, pp
      EXPECT_ON_RANK(mesh.coord(Axis::tp) == me % shape.tp);
      EXPECT_ON_RANK(mesh.coord(Axis::cp) == me / shape.tp % shape.cp);
      EXPECT_ON_RANK(mesh.coord(Axis::dp) == me / (shape.tp * shape.cp) % shape.dp);
      EXPECT_ON_RANK(mesh.coord(Axis::pp) == me / (shape.tp * shape.cp * shape.dp));
      EXPECT_ON_RANK(mesh_rank(shape, mesh_coords(shape, me)) == me);
      for (Axis axis : kAxes) {
        comm::Comm& g = mesh.group(axis);
        EXPECT_ON_RANK(g.size() == shape.size(axis));
        EXPECT_ON_RANK(g.rank() == mesh.coord(axis));
        // member i differs from me only along `axis`, where its coordinate is i
        for (int i = 0; i < g.size(); ++i) {
          auto c = mesh_coords(shape, me);
          c[static_cast<int>(axis)] = i;
          EXPECT_ON_RANK(g.world_rank(i) == mesh_rank(shape, c));
        }
        EXPECT_ON_RANK(g.name().rfind(axis_name(axis), 0) == 0);
        std::lock_guard lock(mutex);
        group_names.insert(g.name());
      }
      // the group really works: all-reduce of the world ranks along tp
      Tensor t = Tensor::from({1}, {static_cast<float>(me)});
      mesh.group(Axis::tp).all_reduce(t);
      float expected = 0;
      for (int i = 0; i < shape.tp; ++i)
        expected += static_cast<float>(me - mesh.coord(Axis::tp) + i);
      EXPECT_ON_RANK(t.to_vector()[0] == expected);
      // pipeline neighbours: same tp, cp, dp; one stage before / after
      const int stage_stride = shape.tp * shape.cp * shape.dp;
      EXPECT_ON_RANK(mesh.pp_prev() == (mesh.coord(Axis::pp) > 0 ? me - stage_stride : -1));
      EXPECT_ON_RANK(mesh.pp_next() ==
                     (mesh.coord(Axis::pp) + 1 < shape.pp ? me + stage_stride : -1));
    });
    CHECK(failures == std::vector<std::string>{});
    // every axis has ranks / size groups, named <axis>0, <axis>1, ...
    for (Axis axis : kAxes)
      for (int i = 0; i < 8 / shape.size(axis); ++i)
        CHECK(group_names.count(std::string(axis_name(axis)) + std::to_string(i)) == 1);
    size_t groups = 0;
    for (Axis axis : kAxes) groups += static_cast<size_t>(8 / shape.size(axis));
    CHECK(group_names.size() == groups);
  }
}

TEST_CASE("bad meshes are one clear line", "[mesh]") {
  auto message = [](MeshShape shape, int world) {
    try {
      shape.validate(world);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string wrong_product = message({.tp = 3, .dp = 2}, 8);
  CHECK_THAT(wrong_product, Catch::Contains("holds 6 ranks but the world has 8"));
  CHECK(wrong_product.find('\n') == std::string::npos);
  CHECK_THAT(message({.tp = 0}, 8), Catch::Contains("axis tp has size 0"));
  CHECK_THAT(message({.tp = 2, .pp = -1}, 8), Catch::Contains("axis pp has size -1"));
  CHECK(message({.tp = 2, .cp = 2, .dp = 2}, 8) == "(accepted)");
  // and the Mesh constructor refuses it on every rank before any split
  World world(WorldOptions{.ranks = 4, .all_reduce = selected_all_reduce()});
  CHECK_THROWS_WITH(world.run([&](RankContext& ctx) { Mesh mesh(*ctx.comm, {.tp = 3}); }),
                    Catch::Contains("holds 3 ranks but the world has 4"));
}

TEST_CASE("a mesh with a group factory asks it for every axis group, never Comm::split", "[mesh]") {
  World world(WorldOptions{.ranks = 4, .all_reduce = selected_all_reduce()});
  const MeshShape shape{.tp = 2, .dp = 2};
  std::mutex mutex;
  std::set<std::string> asked;  // "rank r: axis members... index i name"
  world.run([&](RankContext& ctx) {
    const MeshGroupFactory make_group = [&](Axis axis, const std::vector<int>& members,
                                            int my_index, const std::string& name) {
      std::string line = fmt::format("rank {}: {} [{}] {} {}", ctx.rank, axis_name(axis),
                                     fmt::join(members, ","), my_index, name);
      std::lock_guard lock(mutex);
      asked.insert(line);
      return std::unique_ptr<comm::Comm>();  // Mesh only stores what the factory made
    };
    Mesh mesh(*ctx.comm, shape, make_group);
  });
  CHECK(asked.size() == 20);  // 4 ranks x (4 axes + ep; with ep = 1 edp is the dp group)
  CHECK(asked.count("rank 1: tp [0,1] 1 tp0") == 1);
  CHECK(asked.count("rank 3: dp [1,3] 1 dp1") == 1);
  CHECK(asked.count("rank 2: pp [2] 0 pp2") == 1);
  CHECK(asked.count("rank 3: ep [3] 0 ep3") == 1);
}

TEST_CASE("the expert axes: ep splits each dp group into blocks of ep ranks, edp strides them",
          "[mesh][ep]") {
  // tp=2 dp=4 pp=1 on 8 ranks: dp group 0 is world ranks {0,2,4,6}; with ep=2, d = edp*2 + e.
  World world(WorldOptions{.ranks = 8, .all_reduce = selected_all_reduce()});
  for (int ep : {1, 2, 4}) {
    const MeshShape shape{.tp = 2, .dp = 4, .ep = ep};
    INFO(shape.describe());
    std::mutex mutex;
    std::set<std::string> lines;  // "rank r: ep0 [0,2] 0; edp0 [0,4] 0"
    failures.clear();
    world.run([&](RankContext& ctx) {
      Mesh mesh(*ctx.comm, shape);
      const int me = ctx.rank, d = mesh.coord(Axis::dp);
      EXPECT_ON_RANK(mesh.coord(Axis::ep) == d % ep);
      EXPECT_ON_RANK(mesh.coord(Axis::edp) == d / ep);
      std::string line = fmt::format("rank {}:", me);
      for (Axis axis : kExpertAxes) {
        comm::Comm& g = mesh.group(axis);
        EXPECT_ON_RANK(g.size() == shape.size(axis));
        EXPECT_ON_RANK(g.rank() == mesh.coord(axis));
        std::vector<int> members;
        for (int i = 0; i < g.size(); ++i) members.push_back(g.world_rank(i));
        line += fmt::format(" {} [{}] {};", g.name(), fmt::join(members, ","), g.rank());
      }
      // the groups really work: the sum of the world ranks over ep, then over edp
      Tensor t = Tensor::from({1}, {static_cast<float>(me)});
      mesh.group(Axis::ep).all_reduce(t);
      mesh.group(Axis::edp).all_reduce(t);
      EXPECT_ON_RANK(t.to_vector()[0] == static_cast<float>(me % 2 ? 16 : 12));  // the dp group
      std::lock_guard lock(mutex);
      lines.insert(line);
    });
    CHECK(failures == std::vector<std::string>{});
    if (ep == 1) {  // every rank its own ep group; edp is the dp group
      CHECK(lines.count("rank 4: ep4 [4] 0; dp0 [0,2,4,6] 2;") == 1);
      CHECK(lines.count("rank 7: ep7 [7] 0; dp1 [1,3,5,7] 3;") == 1);
    } else if (ep == 2) {
      CHECK(lines.count("rank 0: ep0 [0,2] 0; edp0 [0,4] 0;") == 1);
      CHECK(lines.count("rank 6: ep2 [4,6] 1; edp2 [2,6] 1;") == 1);
      CHECK(lines.count("rank 3: ep1 [1,3] 1; edp3 [3,7] 0;") == 1);
    } else {  // one ep group per dp group; each rank alone in its edp group
      CHECK(lines.count("rank 4: ep0 [0,2,4,6] 2; edp4 [4] 0;") == 1);
      CHECK(lines.count("rank 5: ep1 [1,3,5,7] 2; edp5 [5] 0;") == 1);
    }
  }
}

TEST_CASE("ep must divide dp: one line naming the sizes that work", "[mesh][ep]") {
  MeshShape shape{.dp = 4, .ep = 3};
  try {
    shape.validate(4);
    FAIL("accepted ep=3 with dp=4");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("ep=3 does not divide dp=4"));
    CHECK_THAT(message, Catch::Contains("ep = one of 1, 2, 4"));
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK(MeshShape{.dp = 4, .ep = 2}.describe() == "tp=1 cp=1 dp=4 pp=1 ep=2");
  CHECK(MeshShape{.dp = 4}.describe() == "tp=1 cp=1 dp=4 pp=1");
}

TEST_CASE("the group factory is asked for the ep and edp groups too", "[mesh][ep]") {
  World world(WorldOptions{.ranks = 4, .all_reduce = selected_all_reduce()});
  std::mutex mutex;
  std::set<std::string> asked;
  world.run([&](RankContext& ctx) {
    const MeshGroupFactory make_group = [&](Axis axis, const std::vector<int>& members,
                                            int my_index, const std::string& name) {
      std::lock_guard lock(mutex);
      asked.insert(fmt::format("rank {}: {} [{}] {} {}", ctx.rank, axis_name(axis),
                               fmt::join(members, ","), my_index, name));
      return std::unique_ptr<comm::Comm>();
    };
    Mesh mesh(*ctx.comm, {.dp = 4, .ep = 2}, make_group);
  });
  CHECK(asked.size() == 24);  // 4 ranks x 6 groups
  CHECK(asked.count("rank 3: ep [2,3] 1 ep1") == 1);
  CHECK(asked.count("rank 3: edp [1,3] 1 edp1") == 1);
  CHECK(asked.count("rank 0: edp [0,2] 0 edp0") == 1);
}

}  // namespace test_mesh
