// Run under mpirun -n K: every collective on the MPI backend against a serial reference.
// Exits non-zero (and prints what differed) on any mismatch.
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/comm/algorithms/algorithms.h"
#include "core/comm/comm.h"
#include "core/world/world.h"
#include "exercises/exercises.h"  // the reference ring all-reduce, every backend's all_reduce

using namespace mgpu;

namespace {
std::vector<float> input(int rank, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = float((rank + 1) * 3 + i % 11);
  return v;
}
}  // namespace

int main() {
  WorldOptions o;
  o.backend = "mpi";
  o.comm_timeout = 20;
  o.all_reduce = &mgpu::reference::ring_all_reduce;
  World world(o);
  int failures = 0;
  auto expect = [&](bool ok, const char* what, int64_t n) {
    if (!ok) {
      std::fprintf(stderr, "rank mismatch in %s (n=%lld)\n", what, static_cast<long long>(n));
      ++failures;
    }
  };
  world.run([&](RankContext& ctx) {
    const int N = ctx.world_size, r = ctx.rank;
    for (int64_t n : {0, 1, 2, 7, 1000, 1025}) {
      std::vector<float> sum(n, 0.0f);
      for (int k = 0; k < N; ++k) {
        auto v = input(k, n);
        for (int64_t i = 0; i < n; ++i) sum[i] += v[i];
      }
      Tensor t = Tensor::from({n}, input(r, n));
      ctx.comm->all_reduce(t);
      expect(t.to_vector() == sum, "all_reduce sum", n);
      Tensor a = Tensor::from({n}, input(r, n));
      ctx.comm->all_reduce_async(a, comm::ReduceOp::avg).wait();
      auto av = a.to_vector();
      for (int64_t i = 0; i < n; ++i) expect(std::abs(av[i] - sum[i] / N) < 1e-4f, "avg", n);
      auto [b, e] = comm::chunk_range(n, N, r);
      Tensor out = Tensor::empty({e - b}, MemCategory::workspace);
      ctx.comm->reduce_scatter(Tensor::from({n}, input(r, n)), out);
      expect(out.to_vector() == std::vector<float>(sum.begin() + b, sum.begin() + e),
             "reduce_scatter", n);
      Tensor all = Tensor::empty({n}, MemCategory::workspace);
      ctx.comm->all_gather(
          Tensor::from({e - b}, std::vector<float>(sum.begin() + b, sum.begin() + e)), all);
      expect(all.to_vector() == sum, "all_gather", n);
      Tensor bc = Tensor::from({n}, input(r, n));
      ctx.comm->broadcast(bc, N - 1);
      expect(bc.to_vector() == input(N - 1, n), "broadcast", n);
      // The async forms equal the blocking ones, bit for bit.
      Tensor out_async = Tensor::empty({e - b}, MemCategory::workspace);
      ctx.comm->reduce_scatter_async(Tensor::from({n}, input(r, n)), out_async).wait();
      expect(out_async.to_vector() == out.to_vector(), "reduce_scatter_async", n);
      Tensor all_async = Tensor::empty({n}, MemCategory::workspace);
      ctx.comm->all_gather_async(out, all_async).wait();
      expect(all_async.to_vector() == sum, "all_gather_async", n);
      // all_to_all: rank r's block j (values naming r and j) must land in block r of rank j.
      const int64_t block = n;
      std::vector<float> blocks(block * N);
      for (int j = 0; j < N; ++j)
        for (int64_t i = 0; i < block; ++i)
          blocks[j * block + i] = float(r * 100000 + j * 2000 + i);
      Tensor to_all = Tensor::from({block * N}, blocks);
      Tensor from_all = Tensor::empty({block * N}, MemCategory::workspace);
      ctx.comm->all_to_all(to_all, from_all);
      auto got_blocks = from_all.to_vector();
      bool blocks_ok = true;
      for (int j = 0; j < N; ++j)
        for (int64_t i = 0; i < block; ++i)
          blocks_ok = blocks_ok && got_blocks[j * block + i] == float(j * 100000 + r * 2000 + i);
      expect(blocks_ok, "all_to_all", n);
      ctx.comm->barrier();
    }
    // all_to_all_v: uneven blocks (zeros among them, rank 1 sending nothing) land in source order
    {
      auto count = [](int src, int dst) -> int64_t {
        return src == 1 ? 0 : (3 * src + 2 * dst + 1) % 5;
      };
      std::vector<int64_t> send(N), recv(N);
      std::vector<float> mine, expected;
      for (int j = 0; j < N; ++j) {
        send[j] = count(r, j);
        recv[j] = count(j, r);
        for (int64_t i = 0; i < send[j]; ++i) mine.push_back(float(r * 100000 + j * 2000 + i));
        for (int64_t i = 0; i < recv[j]; ++i) expected.push_back(float(j * 100000 + r * 2000 + i));
      }
      const auto sent = static_cast<int64_t>(mine.size());
      Tensor in = Tensor::from({sent}, mine);
      Tensor out = Tensor::empty({static_cast<int64_t>(expected.size())}, MemCategory::workspace);
      ctx.comm->all_to_all_v(in, send, out, recv);
      expect(out.to_vector() == expected, "all_to_all_v", sent);
    }
    // p2p ring and split
    Tensor token = Tensor::from({1}, {float(r)});
    Tensor got = Tensor::empty({1}, MemCategory::workspace);
    comm::Work w = ctx.comm->irecv(got, (r - 1 + N) % N, 9);
    ctx.comm->send(token, (r + 1) % N, 9);
    w.wait();
    expect(got.to_vector()[0] == float((r - 1 + N) % N), "send/recv ring", 1);
    // recv_reduce adds straight from MPI's buffer: bit for bit what recv + add_into gives.
    {
      const int64_t n = 1031;
      std::vector<float> mine(n), start(n);
      for (int64_t i = 0; i < n; ++i) {
        mine[i] = float(r + 1) * 0.1f + float(i) * 1e-3f;
        start[i] = 1.0f / float(i + 1);
      }
      const Tensor message = Tensor::from({n}, mine);
      Tensor fused = Tensor::from({n}, start), unfused = Tensor::from({n}, start);
      Tensor incoming = Tensor::empty({n}, MemCategory::workspace);
      comm::Work first = ctx.comm->isend(message, (r + 1) % N, 12);
      ctx.comm->recv_reduce(fused, (r - 1 + N) % N, 12);
      first.wait();
      comm::Work second = ctx.comm->isend(message, (r + 1) % N, 13);
      ctx.comm->recv(incoming, (r - 1 + N) % N, 13);
      second.wait();
      comm::algorithms::add_into(unfused, incoming);
      expect(std::memcmp(fused.f32(), unfused.f32(), n * sizeof(float)) == 0, "recv_reduce", n);
    }
    // irecvs match messages in the order they were posted, whatever order they are waited in.
    if (N >= 2 && r < 2) {
      if (r == 0) {
        for (int i = 0; i < 3; ++i) ctx.comm->send(Tensor::from({1}, {float(10 + i)}), 1, 5);
      } else {
        std::vector<Tensor> bufs;
        std::vector<comm::Work> works;
        for (int i = 0; i < 3; ++i) bufs.push_back(Tensor::empty({1}, MemCategory::workspace));
        for (int i = 0; i < 3; ++i) works.push_back(ctx.comm->irecv(bufs[i], 0, 5));
        for (int i = 2; i >= 0; --i) works[i].wait();
        for (int i = 0; i < 3; ++i)
          expect(bufs[i].to_vector()[0] == float(10 + i), "irecv post order", i);
      }
    }
    // Host messages move their bytes as they are: text of odd length, int64 no float holds.
    {
      const std::vector<uint8_t> text = {'{', '}', '\n'};
      const std::vector<int64_t> counters = {(int64_t{1} << 53) + 1, -int64_t(r)};
      comm::send_values(*ctx.comm, text, (r + 1) % N, 14);
      comm::send_values(*ctx.comm, counters, (r + 1) % N, 14);
      expect(comm::recv_values<uint8_t>(*ctx.comm, (r - 1 + N) % N, 14) == text, "host text", 3);
      const std::vector<int64_t> got = comm::recv_values<int64_t>(*ctx.comm, (r - 1 + N) % N, 14);
      expect(got == std::vector<int64_t>{(int64_t{1} << 53) + 1, -int64_t((r - 1 + N) % N)},
             "host int64", 2);
    }
    auto half = ctx.comm->split(r % 2, r);
    Tensor h = Tensor::from({1}, {1.0f});
    half->all_reduce(h);
    expect(h.to_vector()[0] == float(half->size()), "split all_reduce", 1);
  });
  auto trace = world.collect_trace();
  if (world.is_root()) {
    if (trace.events.empty()) ++failures;
    std::printf("mpi collectives on %d ranks: %s (%zu events gathered)\n", world.size(),
                failures ? "FAILED" : "ok", trace.events.size());
  }
  return failures ? 1 : 0;
}
