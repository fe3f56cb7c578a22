// Why the local backend's ring all-gather is copied by the sender ("the push",
// docs/lessons/01-collectives.md): two bare threads, one per core, meet at flags (no mailbox, no
// lock) and move the same bytes as a 2-rank ring all-reduce, with the receiver copying each
// all-gather chunk (pull) or the sender copying it (push); then a pipeline-style hand-over, where
// a producer's fresh buffer moves into a consumer's, both ways. All variants take turns every 100
// iterations in one process, so they see the same machine; each figure is a median.
//
// Usage: bench_push_pull [elements=65536] [iterations=12000]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

Buffer page_aligned_floats(size_t n) {
  const size_t bytes = (n * sizeof(float) + 4095) / 4096 * 4096;
  auto* p = static_cast<float*>(std::aligned_alloc(4096, bytes));
  std::memset(p, 0, bytes);
  return Buffer(p);
}

// The CPUs this process may run on; the two threads are pinned to the first two of them.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
#endif
  return cpus;
}

void pin_to(int cpu) {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#endif
}

// A two-thread barrier of flags, each on its own cache line: arriving costs one store, and a
// thread spins only on its partner's line.
struct alignas(64) Flag {
  std::atomic<long> count{0};
};

struct Pair {
  Flag arrived[2];
  void meet(int me, long& round) {
    arrived[me].count.store(++round, std::memory_order_release);
    while (arrived[1 - me].count.load(std::memory_order_acquire) < round) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
};

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

__attribute__((noinline)) void add_into(float* __restrict acc, const float* __restrict x,
                                        size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
}

__attribute__((noinline)) double sum_of(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += x[i];
  return s;
}

enum Variant { kAllReducePull, kAllReducePush, kFreshPull, kFreshPush, kP2pPull, kP2pPush, kCount };
constexpr const char* kNames[kCount] = {
    "all-reduce, all-gather pulled", "all-reduce, all-gather pushed", "rewritten tensor, pulled",
    "rewritten tensor, pushed",      "p2p, consumer pulls",           "p2p, producer pushes"};

struct Samples {
  std::vector<double> total, phase, consume;
};

}  // namespace

int main(int argc, char** argv) {
  const long elements = argc > 1 ? std::atol(argv[1]) : 65536;
  const long iterations = argc > 2 ? std::atol(argv[2]) : 12000;
  if (elements < 32 || elements % 32 != 0 || iterations < 600) {
    std::fprintf(stderr,
                 "bench_push_pull: want [elements: a multiple of 32, >= 32] [iterations >= 600], "
                 "e.g. bench_push_pull 65536 12000\n");
    return 2;
  }
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) {
    std::fprintf(stderr,
                 "bench_push_pull: needs two CPUs to pin its threads to, this process may use %zu "
                 "(run it outside taskset/mpirun binding)\n",
                 cpus.size());
    return 2;
  }

  const size_t n = static_cast<size_t>(elements), half = n / 2;
  Buffer tensor[2] = {page_aligned_floats(n), page_aligned_floats(n)};
  Buffer produced = page_aligned_floats(half), consumed = page_aligned_floats(half);
  Pair pair;
  Samples samples[kCount];
  std::atomic<long> wrong_sums{0};  // both threads check what they read
  double pattern_sum = 0;  // the sum of i % 7 over a chunk, to check what the consumer read
  for (size_t i = 0; i < half; ++i) pattern_sum += static_cast<double>(i % 7);
  auto p2p_sum = [&](long it) { return static_cast<double>(it) * half + pattern_sum; };

  auto rank = [&](int me) {
    pin_to(cpus[static_cast<size_t>(me)]);
    const int peer = 1 - me;
    float* mine = tensor[me].get();
    const float* theirs = tensor[peer].get();
    long round = 0;
    for (long it = 0; it < iterations; ++it) {
      const auto v = static_cast<Variant>((it / 100) % kCount);
      const bool record = me == 0 && it % 100 >= 5;  // the first few after a switch warm up
      Clock::time_point t0, t1, t2, t3;
      if (v == kP2pPull || v == kP2pPush) {
        // Rank 0 produces a chunk (as a stage writes its activations), it moves to rank 1's
        // buffer, rank 1 reads it.
        if (me == 0)
          for (size_t i = 0; i < half; ++i)
            produced[i] = static_cast<float>(it) + static_cast<float>(i % 7);
        pair.meet(me, round);
        t1 = Clock::now();
        if ((v == kP2pPush) == (me == 0)) std::memcpy(consumed.get(), produced.get(), half * 4);
        pair.meet(me, round);
        t2 = Clock::now();
        if (me == 1 && sum_of(consumed.get(), half) != p2p_sum(it)) wrong_sums++;
        pair.meet(me, round);
        t3 = Clock::now();
        t0 = t1;
      } else {
        const bool fresh = v == kFreshPull || v == kFreshPush;
        if (fresh) std::fill(mine, mine + n, static_cast<float>(me + 1));  // as backward does
        // Without the rewrite every call doubles the values: start each block from zeros, which
        // stay zeros, instead of running into infinities.
        if (!fresh && it % 100 == 0) std::fill(mine, mine + n, 0.0f);
        pair.meet(me, round);
        t0 = Clock::now();
        // Reduce-scatter (one ring step): I add the peer's copy of chunk `me` into mine.
        add_into(mine + me * half, theirs + me * half, half);
        pair.meet(me, round);
        t1 = Clock::now();
        // All-gather (one ring step): chunk `peer`, summed on the peer, comes to me.
        if (v == kAllReducePull || v == kFreshPull)
          std::memcpy(mine + peer * half, theirs + peer * half, half * 4);  // I copy it in
        else
          std::memcpy(tensor[peer].get() + me * half, mine + me * half, half * 4);  // I send mine
        pair.meet(me, round);
        t2 = Clock::now();
        // The consumer (the optimizer) reads the result: is a pushed result slower to read?
        if (fresh && sum_of(mine, n) != 3.0 * static_cast<double>(n)) wrong_sums++;
        pair.meet(me, round);
        t3 = Clock::now();
      }
      if (record) {
        samples[v].total.push_back(us_between(t0, t2));
        samples[v].phase.push_back(us_between(t1, t2));
        samples[v].consume.push_back(us_between(t2, t3));
      }
    }
  };
  std::thread first(rank, 0), second(rank, 1);
  first.join();
  second.join();

  std::printf("bench_push_pull: %ld floats (chunks of %zu KiB), CPUs %d and %d, %ld iterations\n",
              elements, half * 4 / 1024, cpus[0], cpus[1], iterations);
  std::printf("%-32s %12s %12s %14s\n", "variant (medians, us)", "all-reduce", "all-gather",
              "read result");
  for (int v = kAllReducePull; v <= kFreshPush; ++v) {
    char read[32] = "-";  // only the rewritten-tensor rows read their result
    if (v >= kFreshPull) std::snprintf(read, sizeof read, "%.2f", median(samples[v].consume));
    std::printf("%-32s %12.2f %12.2f %14s\n", kNames[v], median(samples[v].total),
                median(samples[v].phase), read);
  }
  std::printf("%-32s %12s %12s %14s\n", "", "", "transfer", "consumer read");
  for (int v = kP2pPull; v <= kP2pPush; ++v)
    std::printf("%-32s %12s %12.2f %14.2f\n", kNames[v], "", median(samples[v].phase),
                median(samples[v].consume));
  const double ag_ratio =
      median(samples[kAllReducePull].total) / median(samples[kAllReducePush].total);
  const double fresh_ratio = median(samples[kFreshPull].total) / median(samples[kFreshPush].total);
  const double p2p_ratio = median(samples[kP2pPull].phase) / median(samples[kP2pPush].phase);
  std::printf(
      "pull / push: all-reduce %.2fx, rewritten tensor %.2fx, p2p transfer %.2fx "
      "(> 1: the push is faster)\n",
      ag_ratio, fresh_ratio, p2p_ratio);
  if (wrong_sums.load() != 0) {
    std::fprintf(stderr, "bench_push_pull: %ld results had the wrong sum\n", wrong_sums.load());
    return 1;
  }
  return 0;
}
