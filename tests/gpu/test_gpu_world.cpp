// World on GPUs: shared-GPU mode (more ranks than GPUs, local backend, device buffers reduced
// with CUDA kernels) and one GPU per rank with NCCL. Each all-reduces rank-dependent values and
// checks the exact sum, then all-gathers and broadcasts.
#include <numeric>

#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/runtime/world.h"
#include "gpu_test_util.h"

using namespace mgpu;

namespace {

// Every rank holds n values rank + i * 0.5; the sum over ranks of those is exact in fp32.
void check_collectives(World& world) {
  const int n = 1000;  // not a multiple of the world size: uneven ring chunks
  const int size = world.size();
  world.run([&](RankContext& ctx) {
    REQUIRE(ctx.device.kind == DeviceKind::cuda);
    std::vector<float> mine(n);
    for (int i = 0; i < n; ++i) mine[i] = float(ctx.rank) + 0.5f * float(i);
    Tensor t = Tensor::from({n}, mine, MemCategory::comm_buffers);
    REQUIRE(t.device().kind == DeviceKind::cuda);
    ctx.comm->all_reduce(t, comm::ReduceOp::sum);
    std::vector<float> got = t.to_vector();
    const float rank_sum = float(size * (size - 1) / 2);
    for (int i = 0; i < n; ++i)
      if (got[i] != rank_sum + float(size) * 0.5f * float(i)) {
        FAIL_CHECK("rank " << ctx.rank << " all_reduce[" << i << "] = " << got[i]);
        break;
      }

    Tensor b =
        Tensor::from({4}, std::vector<float>(4, float(ctx.rank + 7)), MemCategory::comm_buffers);
    ctx.comm->broadcast(b, 0);
    CHECK(b.to_vector() == std::vector<float>(4, 7.0f));

    Tensor part = Tensor::from({2}, {float(ctx.rank), float(ctx.rank)}, MemCategory::comm_buffers);
    Tensor all = Tensor::zeros({2 * size}, MemCategory::comm_buffers);
    ctx.comm->all_gather(part, all);
    std::vector<float> gathered = all.to_vector();
    for (int r = 0; r < size; ++r) CHECK(gathered[2 * r] == float(r));
  });
}

WorldOptions gpu_world(int ranks, const std::string& backend) {
  WorldOptions o;
  o.all_reduce = selected_all_reduce();
  o.ranks = ranks;
  o.device = DeviceKind::cuda;
  o.clock = ClockKind::cuda;  // also exercises the scope-boundary syncs
  o.backend = backend;
  o.comm_timeout = 60;
  return o;
}

}  // namespace

TEST_CASE("shared-GPU mode: more ranks than GPUs on the local backend", "[gpu]") {
  MGPU_REQUIRE_GPU();
  const int ranks = cuda::device_count() + 1;  // forces sharing
  World world(gpu_world(ranks, "auto"));
  CHECK(world.rank(0).comm->backend() == "local");
  check_collectives(world);
}

TEST_CASE("one GPU per rank: nccl backend", "[gpu]") {
  MGPU_REQUIRE_GPU();
#ifndef MGPU_HAVE_NCCL
  WARN("this build has no NCCL: skipped");
  return;
#endif
  const int ranks = cuda::device_count();
  World world(gpu_world(ranks, "auto"));
  CHECK(world.rank(0).comm->backend() == "nccl");
  check_collectives(world);
}
