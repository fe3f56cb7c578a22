// World on GPUs: shared-GPU mode (more ranks than GPUs, local backend, device buffers reduced
// with CUDA kernels) and one GPU per rank with NCCL. Each all-reduces rank-dependent values and
// checks the exact sum, then all-gathers and broadcasts. On NCCL also: all_to_all, all_to_all_v
// and the async reduce-scatter / all-gather deliver the right values, and every operation's
// trace event says what the local backend's says (op, bytes, group, seq, peer, sent_bytes; on
// the modeled clock the same times); on the cuda clock each follows the one before it. The cuda
// clock's compute side: steps, scopes and kernels timed by marks on the compute stream.
#include <algorithm>
#include <numeric>
#include <tuple>

#include "common/collective_script.h"
#include "common/selected_seams.h"
#include "core/comm/comm.h"
#include "core/ops/ops.h"
#include "core/world/world.h"
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

// What rank `src` puts in element i of the block it sends to rank `dst`.
float block_value(int src, int dst, int64_t i) {
  return float(src * 1000 + dst * 100 + i);
}

// all_to_all, all_to_all_v (uneven counts) and the async reduce-scatter / all-gather, values
// checked exactly (small integers: any order of additions gives the same sum).
void check_exchanges(World& world) {
  const int size = world.size();
  world.run([&](RankContext& ctx) {
    const int r = ctx.rank;
    const int64_t block = 3;
    std::vector<float> mine(size_t(block * size));
    for (int dst = 0; dst < size; ++dst)
      for (int64_t i = 0; i < block; ++i) mine[dst * block + i] = block_value(r, dst, i);
    Tensor in = Tensor::from({block * size}, mine, MemCategory::comm_buffers);
    Tensor out = Tensor::zeros({block * size}, MemCategory::comm_buffers);
    ctx.comm->all_to_all(in, out);
    std::vector<float> got = out.to_vector();
    for (int src = 0; src < size; ++src)
      for (int64_t i = 0; i < block; ++i) CHECK(got[src * block + i] == block_value(src, r, i));

    // Rank i sends j (i + j) % 3 + 1 elements.
    std::vector<int64_t> send(size), recv(size);
    std::vector<float> packed;
    for (int j = 0; j < size; ++j) {
      send[j] = (r + j) % 3 + 1;
      recv[j] = (j + r) % 3 + 1;
      for (int64_t i = 0; i < send[j]; ++i) packed.push_back(block_value(r, j, i));
    }
    Tensor v_in = Tensor::from({int64_t(packed.size())}, packed, MemCategory::comm_buffers);
    Tensor v_out = Tensor::zeros({std::accumulate(recv.begin(), recv.end(), int64_t{0})},
                                 MemCategory::comm_buffers);
    ctx.comm->all_to_all_v(v_in, send, v_out, recv);
    std::vector<float> arrived = v_out.to_vector();
    size_t at = 0;
    for (int src = 0; src < size; ++src)
      for (int64_t i = 0; i < recv[src]; ++i) CHECK(arrived[at++] == block_value(src, r, i));

    const int64_t n = 4 * size;  // NCCL's reduce-scatter needs equal chunks
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[i] = float(r + i);
    Tensor full = Tensor::from({n}, values, MemCategory::comm_buffers);
    Tensor chunk = Tensor::zeros({4}, MemCategory::comm_buffers);
    comm::Work scattering = ctx.comm->reduce_scatter_async(full, chunk);
    scattering.wait();
    std::vector<float> summed = chunk.to_vector();
    for (int64_t i = 0; i < 4; ++i)
      CHECK(summed[i] == float(size * (size - 1) / 2 + size * (4 * r + i)));
    Tensor gathered = Tensor::zeros({n}, MemCategory::comm_buffers);
    comm::Work gathering = ctx.comm->all_gather_async(chunk, gathered);
    gathering.wait();
    std::vector<float> all = gathered.to_vector();
    for (int64_t i = 0; i < n; ++i) CHECK(all[i] == float(size * (size - 1) / 2 + size * i));
  });
}

// Every operation of the collective script on `world`, and the events its ranks recorded.
std::vector<std::vector<trace::Event>> scripted_events(World& world, int64_t n, double stagger) {
  world.run([&](RankContext& ctx) {
    ctx.tracer.clear();
    testing::run_every_collective(ctx, *ctx.comm, n, 1.0, 0, stagger);
  });
  std::vector<std::vector<trace::Event>> events(world.size());
  for (const auto& e : world.collect_trace().events)
    if (e.lane == trace::Lane::comm) events[e.rank].push_back(e);
  for (auto& rank_events : events)
    std::stable_sort(rank_events.begin(), rank_events.end(),
                     [](const trace::Event& a, const trace::Event& b) {
                       return std::tie(a.seq, a.op) < std::tie(b.seq, b.op);
                     });
  return events;
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
  MGPU_REQUIRE_NCCL();
  const int ranks = cuda::device_count();
  World world(gpu_world(ranks, "auto"));
  CHECK(world.rank(0).comm->backend() == "nccl");
  check_collectives(world);
}

TEST_CASE("nccl: all_to_all, all_to_all_v and the async reduce-scatter and all-gather", "[gpu]") {
  MGPU_REQUIRE_NCCL();
  World world(gpu_world(cuda::device_count(), "nccl"));
  check_exchanges(world);
}

TEST_CASE("nccl's trace events say what the local backend's say", "[gpu]") {
  MGPU_REQUIRE_NCCL();
  const int ranks = cuda::device_count();
  const int64_t n = 257 * ranks;  // NCCL's reduce-scatter needs equal chunks
  WorldOptions on_gpus = gpu_world(ranks, "nccl");
  on_gpus.clock = ClockKind::modeled;
  on_gpus.trace = true;
  WorldOptions on_cpus = on_gpus;
  on_cpus.device = DeviceKind::cpu;
  on_cpus.backend = "local";
  for (double stagger : {0.0, 3e-6}) {  // members together, or each 3 us after the one before
    World nccl_world(on_gpus), local_world(on_cpus);
    const auto nccl = scripted_events(nccl_world, n, stagger);
    const auto local = scripted_events(local_world, n, stagger);
    for (int r = 0; r < ranks; ++r) {
      REQUIRE(nccl[r].size() == local[r].size());
      for (size_t i = 0; i < local[r].size(); ++i) {
        const trace::Event &a = nccl[r][i], &b = local[r][i];
        INFO("stagger " << stagger << ", rank " << r << ": " << b.op << " #" << b.seq);
        CHECK(a.op == b.op);
        CHECK(a.group == b.group);
        CHECK(a.bytes == b.bytes);
        CHECK(a.sent_bytes == b.sent_bytes);
        CHECK(a.peer == b.peer);
        // The members' issue times meet on the board, so the cost model charges what the local
        // backend's messages take; all_to_all_v's depends on partners' counts NCCL cannot see.
        if (a.op == "all_to_all_v") continue;
        CHECK(a.start == Approx(b.start).margin(1e-12));
        CHECK(a.dur == Approx(b.dur).margin(1e-12));
        if (a.seq < 0) CHECK(a.wait == Approx(b.wait).margin(1e-12));
      }
    }
  }

  // On the cuda clock: the same events, timed by CUDA events on one stream, so in issue order.
  on_gpus.clock = ClockKind::cuda;
  World timed_world(on_gpus);
  const auto timed = scripted_events(timed_world, n, 0);
  World local_world(on_cpus);
  const auto local = scripted_events(local_world, n, 0);
  for (int r = 0; r < ranks; ++r) {
    REQUIRE(timed[r].size() == local[r].size());
    const trace::Event* previous = nullptr;
    for (size_t i = 0; i < timed[r].size(); ++i) {
      const trace::Event& e = timed[r][i];
      INFO("rank " << r << ": " << e.op << " #" << e.seq);
      CHECK(e.op == local[r][i].op);
      CHECK(e.sent_bytes == local[r][i].sent_bytes);
      CHECK(e.start > 0);
      CHECK(e.dur >= 0);
      if (e.seq < 0) continue;  // the messages, issued after the collectives
      if (previous) CHECK(e.start >= previous->end());
      previous = &e;
    }
  }
}

TEST_CASE("cuda clock: steps, scopes and kernels timed by marks on the compute stream", "[gpu]") {
  MGPU_REQUIRE_GPU();
  WorldOptions o = gpu_world(1, "local");
  World world(o);
  world.run([&](RankContext& ctx) {
    Tensor a = Tensor::from({256, 256}, std::vector<float>(256 * 256, 0.5f));
    Tensor c = Tensor::zeros({256, 256}, MemCategory::activations);
    ctx.tracer.clear();
    for (int step = 0; step < 2; ++step) {
      StepScope s(step);
      ComputeScope outer({.name = "outer", .cat = trace::cat::forward, .step = step});
      for (int i = 0; i < 4; ++i) {
        ComputeScope inner({.name = "gemm", .cat = trace::cat::forward, .step = step});
        ops::matmul(c, a, a);
      }
    }
    ops::matmul(c, a, a);  // a kernel outside any scope is its own event
  });
  std::vector<trace::Event> steps, outers, inners, kernels;
  for (const auto& e : world.collect_trace().events) {
    if (e.lane == trace::Lane::step)
      steps.push_back(e);
    else if (e.name == "outer")
      outers.push_back(e);
    else if (e.name == "gemm")
      inners.push_back(e);
    else if (e.lane == trace::Lane::compute)
      kernels.push_back(e);
  }
  REQUIRE(steps.size() == 2);
  REQUIRE(outers.size() == 2);
  REQUIRE(inners.size() == 8);
  REQUIRE(kernels.size() == 1);
  // Marks on one stream are placed in the order they were recorded: every region lies inside
  // the one around it, and each inner scope follows the one before it.
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    const trace::Event& s = steps[step];
    const trace::Event& outer = outers[step];
    CHECK(outer.start >= s.start);
    CHECK(outer.end() <= s.end());
    double previous_end = outer.start;
    for (const auto& inner : inners)
      if (inner.step == step) {
        CHECK(inner.start >= previous_end);
        CHECK(inner.dur > 0);  // a 256^3 GEMM takes the GPU some time
        previous_end = inner.end();
      }
    CHECK(previous_end <= outer.end());
  }
  CHECK(steps[1].start >= steps[0].end());
  CHECK(kernels[0].start >= steps[1].end());
}
