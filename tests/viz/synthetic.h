// Synthetic pipeline traces with known times, for the dashboard's tests, benchmark and figures.
//
// P stages, M micro-batches; a forward takes `fwd` seconds, a backward `bwd`. Each stage runs its
// schedule's actions in order, starting an action when its input is there (the previous stage's
// forward, the next stage's backward) and its stage is free. Activations are sent downstream and
// gradients upstream (send on the sender's comm lane, recv on the receiver's, taking `comm`
// seconds). Memory: parameters + optimizer state, gradients once the first backward has run, and
// one activation buffer per micro-batch in flight.
// With comm = 0 the bubble fraction of both GPipe and 1F1B is (P-1)/(M+P-1).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "core/runtime/trace_event.h"

namespace mgpu::viz::testing {

enum class Schedule { gpipe, one_f_one_b };

struct PipelineSpec {
  int stages = 4;
  int microbatches = 8;
  double fwd = 1e-3, bwd = 2e-3, comm = 0.1e-3;
  Schedule schedule = Schedule::one_f_one_b;
  bool comm_events = true;     // record send/recv events
  bool memory_samples = true;  // record counter samples
};

inline trace::Trace synthetic_pipeline(const PipelineSpec& spec) {
  const int P = spec.stages, M = spec.microbatches;
  struct Action {
    bool forward;
    int mb;
  };
  // Each stage's action list: the schedule as data.
  std::vector<std::vector<Action>> actions(P);
  for (int s = 0; s < P; ++s) {
    if (spec.schedule == Schedule::gpipe) {
      for (int m = 0; m < M; ++m) actions[s].push_back({true, m});
      for (int m = 0; m < M; ++m) actions[s].push_back({false, m});
    } else {
      const int warmup = std::min(P - s - 1, M);
      int f = 0, b = 0;
      for (; f < warmup; ++f) actions[s].push_back({true, f});
      while (f < M) {
        actions[s].push_back({true, f++});
        actions[s].push_back({false, b++});
      }
      while (b < M) actions[s].push_back({false, b++});
    }
  }

  trace::Trace t;
  t.num_ranks = P;
  t.metadata = {
      {"lesson", spec.schedule == Schedule::gpipe ? "GPipe (synthetic)" : "1F1B (synthetic)"},
      {"clock", "modeled"},
      {"config", {{"stages", P}, {"microbatches", M}}},
      {"profile", {{"memory_capacity_GiB", 1.0}}},
      {"predictions", {{"bubble_fraction", double(P - 1) / (M + P - 1)}}}};

  const double inf = 1e300;
  std::vector<std::vector<double>> fwd_end(P, std::vector<double>(M, inf));
  std::vector<std::vector<double>> bwd_end(P, std::vector<double>(M, inf));
  std::vector<size_t> next(P, 0);
  std::vector<double> free_at(P, 0);
  std::vector<int> in_flight(P, 0);
  std::vector<bool> has_grads(P, false);
  constexpr int64_t MiB = 1 << 20;
  auto sample = [&](int s, double time) {
    if (!spec.memory_samples) return;
    trace::CounterSample c;
    c.rank = s;
    c.time = time;
    c.bytes = {200 * MiB, has_grads[s] ? 200 * MiB : 0, 400 * MiB, in_flight[s] * 40 * MiB, 0, 0};
    t.counters.push_back(c);
  };
  auto p2p = [&](int from, int to, double start, int mb, bool activation) {
    if (!spec.comm_events || spec.comm <= 0) return;
    for (int side = 0; side < 2; ++side) {
      trace::Event e;
      e.rank = side == 0 ? from : to;
      e.peer = side == 0 ? to : from;
      e.op = side == 0 ? "send" : "recv";
      e.name = e.op + (activation ? " act" : " grad");
      e.cat = trace::cat::comm;
      e.lane = trace::Lane::comm;
      e.start = start;
      e.dur = spec.comm;
      e.microbatch = mb;
      e.bytes = 4 * MiB;
      e.group = "pp";
      t.events.push_back(e);
    }
  };
  for (int s = 0; s < P; ++s) sample(s, 0);

  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < P; ++s) {
      while (next[s] < actions[s].size()) {
        const Action a = actions[s][next[s]];
        const double hop = spec.comm_events ? spec.comm : 0;
        double ready = free_at[s];
        if (a.forward && s > 0) {
          if (fwd_end[s - 1][a.mb] == inf) break;
          ready = std::max(ready, fwd_end[s - 1][a.mb] + hop);
        }
        if (!a.forward && s < P - 1) {
          if (bwd_end[s + 1][a.mb] == inf) break;
          ready = std::max(ready, bwd_end[s + 1][a.mb] + hop);
        }
        trace::Event e;
        e.rank = s;
        e.lane = trace::Lane::compute;
        e.cat = a.forward ? trace::cat::forward : trace::cat::backward;
        e.name = std::string(a.forward ? "fwd mb" : "bwd mb") + std::to_string(a.mb);
        e.microbatch = a.mb;
        e.start = ready;
        e.dur = a.forward ? spec.fwd : spec.bwd;
        e.flops = a.forward ? 1e12 : 2e12;
        t.events.push_back(e);
        free_at[s] = e.end();
        if (a.forward) {
          fwd_end[s][a.mb] = e.end();
          ++in_flight[s];
          sample(s, e.start);
          if (s < P - 1) p2p(s, s + 1, e.end(), a.mb, true);
        } else {
          bwd_end[s][a.mb] = e.end();
          has_grads[s] = true;
          --in_flight[s];
          sample(s, e.end());
          if (s > 0) p2p(s, s - 1, e.end(), a.mb, false);
        }
        ++next[s];
        progress = true;
      }
    }
  }
  return t;
}

}  // namespace mgpu::viz::testing
