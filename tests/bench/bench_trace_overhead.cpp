// What tracing costs: the same GPT training step (forward, backward, AdamW) on one CPU rank,
// wall clock, with the tracer on and off, in one run. Steps alternate off/on so that a noisy
// shared host slows both alike; the overhead is median(step time on) / median(off) - 1.
// Target: <= 2% for the lessons' models.
//   bench_trace_overhead [rounds]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/model/gpt.h"
#include "core/optim/optimizer.h"
#include "core/runtime/context.h"

using namespace mgpu;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void race(const char* label, const GPTConfig& cfg, int64_t batch, int steps_per_round, int rounds) {
  RankContext ctx(0, 1, Device::cpu(), HardwareProfile::ideal(0), ClockKind::wall);
  ScopedRank scoped(ctx);
  GPT model(cfg);
  optim::AdamW optimizer(model.params(), optim::AdamWOptions{});
  const int64_t seq = cfg.seq_len;
  std::mt19937_64 rng(1);
  std::vector<int32_t> tokens(size_t(batch * seq)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) {
    tokens[i] = int32_t(rng() % uint64_t(cfg.vocab));
    targets[i] = int32_t(rng() % uint64_t(cfg.vocab));
  }
  GPTActivations acts = GPTActivations::allocate(cfg, batch, seq);
  auto timed_step = [&](bool tracing) {
    ctx.tracer.enabled = tracing;
    auto t0 = std::chrono::steady_clock::now();
    model.zero_grad();
    model.forward(tokens, targets, acts);
    model.backward(tokens, acts);
    optimizer.step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  timed_step(true);  // warm-up (allocator, caches)
  const size_t events_per_step = ctx.tracer.events().size();
  std::vector<double> off, on;
  for (int r = 0; r < rounds * steps_per_round; ++r) {
    ctx.tracer.clear();  // events are dropped so memory does not grow over the run
    if (r % 2 == 0) {    // swap the order every pair: the first step of a pair may run differently
      off.push_back(timed_step(false));
      on.push_back(timed_step(true));
    } else {
      on.push_back(timed_step(true));
      off.push_back(timed_step(false));
    }
  }
  std::printf("%-28s %6d %10.3f %10.3f %9zu %+9.2f%%\n", label, rounds * steps_per_round,
              1e3 * median(off), 1e3 * median(on), events_per_step,
              100 * (median(on) / median(off) - 1));
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  if (rounds < 1) {
    std::fprintf(stderr, "bench_trace_overhead: rounds must be >= 1 (e.g. 9)\n");
    return 2;
  }
  std::printf("tracing on vs off, same step, wall clock; steps alternate off/on, medians\n");
  std::printf("%-28s %6s %10s %10s %9s %10s\n", "model", "steps", "off ms", "on ms", "events",
              "overhead");
  GPTConfig tiny;  // the lessons' default: vocab 64, seq 64, 2 layers, dim 64, 4 heads
  race("tiny, batch 8", tiny, 8, 20, rounds);
  GPTConfig mid;
  mid.layers = 4;
  mid.dim = 256;
  mid.heads = 4;
  mid.seq_len = 128;
  mid.vocab = 2048;
  race("4 layers dim 256, batch 4", mid, 4, 3, rounds);
  return 0;
}
