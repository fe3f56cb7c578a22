// The schedule simulator and the closed-form theory it is tested against.
//
// Notation: P stages, M micro-batches, V chunks per stage; f and b are the forward and full
// backward time of one micro-batch on one whole stage; links are free (p2p_time = 0).
//
// GPipe: the first micro-batch reaches the last stage after (P-1)f, the last stage then runs M
//   forwards and M backwards back to back, and the last backward needs (P-1)b to drain to stage 0:
//   step = (M+P-1)(f+b), each stage is busy M(f+b), bubble = (P-1)(f+b),
//   fraction = (P-1)/(M+P-1). 1F1B reorders the same work without shortening the critical path:
//   identical step and fraction (it only lowers memory).
// Interleaved (Megatron): chunk costs are f/V and b/V; the fill/drain ramp is P-1 chunk steps:
//   step = M(f+b) + (P-1)(f+b)/V, fraction = (P-1)/(V*M + P-1). It holds for any M >= P, not
//   only multiples of P: in rounds of g >= P micro-batches a micro-batch is back at stage 0 for
//   its next chunk before stage 0 runs out of the round's work, so no stage waits mid-step.
// ZB-H1 (assumption, as in the paper's headline: F = B = W = t, full backward 2t): the ramp only
//   costs (P-1)(F + B - W) = (P-1)t because deferred W's fill the cooldown. With fewer
//   micro-batches than stages there are not enough W's, adding (P-M)t: step = 3Mt + (P-1)t + max(0,
//   P-M)t, fraction = 1 - 3M/(3M + P - 1 + max(0, P-M)).
// Naive model parallel: M = 1 in the GPipe formula, (P-1)/P.
#include "core/parallel/pipeline/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <deque>
#include <map>
#include <stdexcept>

#include "core/parallel/pipeline/validator.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/theory/schedule_kind.h"

namespace mgpu::pipeline {

CostModel CostModel::uniform(double forward, double backward_input, double backward_weight,
                             double p2p) {
  CostModel costs;
  costs.forward_time = [=](int, int) { return forward; };
  costs.backward_time = [=](int, int) { return backward_input + backward_weight; };
  costs.backward_input_time = [=](int, int) { return backward_input; };
  costs.backward_weight_time = [=](int, int) { return backward_weight; };
  costs.p2p_time = [=](int, int) { return p2p; };
  return costs;
}

double CostModel::compute_time(int stage, const Action& a) const {
  switch (a.kind) {
    case ActionKind::forward:
      return forward_time(stage, a.chunk);
    case ActionKind::backward:
      return backward_time(stage, a.chunk);
    case ActionKind::backward_input:
      return backward_input_time(stage, a.chunk);
    case ActionKind::backward_weight:
      return backward_weight_time(stage, a.chunk);
    default:
      return 0.0;
  }
}

SimulationResult simulate_schedule(const Schedule& s, const CostModel& costs) {
  SimulationResult result;
  result.timeline.resize(s.stages);
  std::map<MessageKey, std::deque<double>> arrivals;  // messages in flight: when each lands
  std::vector<size_t> next(s.stages, 0);
  std::vector<double> clock(s.stages, 0.0);
  // Run every stage as far as it can go; repeat until nobody moves. Order of visiting stages does
  // not change the times: each stage's times depend only on its list and the message arrivals.
  for (bool progress = true; progress;) {
    progress = false;
    for (int stage = 0; stage < s.stages; ++stage) {
      const auto& list = s.actions[stage];
      for (; next[stage] < list.size(); ++next[stage], progress = true) {
        const Action& a = list[next[stage]];
        if (is_compute(a.kind)) {
          const double start = clock[stage];
          clock[stage] += costs.compute_time(stage, a);
          result.timeline[stage].push_back({start, clock[stage], a});
        } else if (a.kind == ActionKind::send_activation || a.kind == ActionKind::send_grad) {
          // A hand-over to this stage's other chunk (the V's turn) is not a message.
          const double p2p = a.peer == stage ? 0.0 : costs.p2p_time(stage, a.peer);
          arrivals[*message_key(s, stage, a)].push_back(clock[stage] + p2p);
        } else {
          auto& queue = arrivals[*message_key(s, stage, a)];
          if (queue.empty()) break;  // blocked until the sender gets there
          clock[stage] = std::max(clock[stage], queue.front());
          queue.pop_front();
        }
      }
    }
  }
  for (int stage = 0; stage < s.stages; ++stage)
    if (next[stage] < s.actions[stage].size()) throw ScheduleError(find_deadlock(s));

  result.makespan = *std::max_element(clock.begin(), clock.end());
  double total_busy = 0;
  for (const auto& row : result.timeline) {
    double busy = 0;
    for (const auto& t : row) busy += t.end - t.start;
    result.busy_time.push_back(busy);
    result.idle_fraction.push_back(result.makespan > 0 ? 1.0 - busy / result.makespan : 0.0);
    total_busy += busy;
  }
  result.bubble_fraction =
      result.makespan > 0 ? 1.0 - total_busy / (s.stages * result.makespan) : 0.0;
  return result;
}

namespace {

using theory::ScheduleKind;

// The V schedules and DualPipe in the theory-mode units (a whole stage's F = 1, B = 2; a V's
// chunk is half of it, DualPipe's a whole stage of one copy, each seeing M/2 micro-batches):
// each stage's bubble and busy time from core/theory/pipeline_bubbles.h.
std::pair<double, double> v_bubble_and_busy(ScheduleKind kind, int P, int M) {
  const theory::ChunkCosts chunk{0.5, 1.0, 0.5}, stage{1.0, 2.0, 1.0};
  const double busy = 2.0 * M * (chunk.F + chunk.B);
  if (kind == ScheduleKind::dualpipe) return {theory::bubble_dualpipe(P, stage), busy};  // PP = P
  if (kind == ScheduleKind::zbv) return {theory::bubble_zbv(P, chunk), busy};
  return {theory::bubble_dualpipe(2 * P, chunk), busy};  // dualpipev: PP = 2P chunks
}

}  // namespace

double bubble_fraction_theory(const std::string& name, int P, int M, int V) {
  const theory::ChunkCosts stage{1.0, 2.0, 1.0};
  switch (const ScheduleKind kind = theory::schedule_kind(name)) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b: {
      const double bubble = theory::bubble_1f1b(P, stage);
      return bubble / (bubble + M * (stage.F + stage.B));
    }
    case ScheduleKind::naive:
      return double(P - 1) / P;
    case ScheduleKind::interleaved:
      return double(P - 1) / (V * M + P - 1);
    case ScheduleKind::zb_h1: {  // with M < P there are too few W's to fill the drain: P-M more
      const double bubble = theory::bubble_zb1p(P, stage) + std::max(0, P - M);
      return bubble / (bubble + M * (stage.F + stage.B));
    }
    case ScheduleKind::zbv:
    case ScheduleKind::dualpipev:
    case ScheduleKind::dualpipe: {
      const auto [bubble, busy] = v_bubble_and_busy(kind, P, M);
      return bubble / (bubble + busy);
    }
  }
  throw std::logic_error("bubble_fraction_theory: a schedule kind without a case");
}

std::string bubble_formula(const std::string& name, int P, int M, int V) {
  switch (const ScheduleKind kind = theory::schedule_kind(name)) {
    case ScheduleKind::naive:
      return fmt::format("(P-1)/P = {}/{}", P - 1, P);
    case ScheduleKind::interleaved:
      return fmt::format("(P-1)/(VM+P-1) = {}/{}", P - 1, V * M + P - 1);
    case ScheduleKind::zb_h1:
      return fmt::format("1 - 3M/(3M+P-1+max(0,P-M)) = {}/{}", P - 1 + std::max(0, P - M),
                         3 * M + P - 1 + std::max(0, P - M));
    case ScheduleKind::zbv:
    case ScheduleKind::dualpipev:
    case ScheduleKind::dualpipe: {
      const auto [bubble, busy] = v_bubble_and_busy(kind, P, M);
      return fmt::format("{} / step = {:g}/{:g}",
                         kind == ScheduleKind::zbv ? "(P-1)F" : "(PP/2-1)(F&B+B-3W)", bubble,
                         bubble + busy);
    }
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
      break;
  }
  return fmt::format("(P-1)/(M+P-1) = {}/{}", P - 1, M + P - 1);
}

namespace {

// Micro-batches (chunk-forwards) whose activations stage s holds at once under `kind`.
int peak_activations_of_stage(ScheduleKind kind, int P, int M, int V, int s) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return M;  // everything is forwarded before anything is released
    case ScheduleKind::naive:
      return 1;
    // 1F1B and ZB-H1: P-s-1 warmup forwards plus the one in the steady F-B pair.
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zb_h1:
      return std::min(P - s, M);
    // 1F1B's PP chunks on EVERY stage (stage 0's peak in 1F1B)
    case ScheduleKind::zbv:
      return theory::peak_chunks_1f1b(2 * P);
    case ScheduleKind::dualpipev:
      return theory::peak_chunks_dualpipe(2 * P);
    // PP + 1 chunks, each a whole stage of one copy
    case ScheduleKind::dualpipe:
      return theory::peak_chunks_dualpipe(P);
    // Interleaved: warmup 2(P-s-1) + (V-1)g chunk-forwards, g the first round's micro-batches
    // (P when M is a multiple of P, as in Megatron), plus one in steady state.
    case ScheduleKind::interleaved:
      return std::min(2 * (P - s - 1) + (V - 1) * interleaved_round_sizes(P, M)[0] + 1, M * V);
  }
  throw std::logic_error("peak_activations_theory: a schedule kind without a case");
}

}  // namespace

std::vector<int> peak_activations_theory(const std::string& name, int P, int M, int V) {
  const ScheduleKind kind = theory::schedule_kind(name);
  std::vector<int> peak(P);
  for (int s = 0; s < P; ++s) peak[s] = peak_activations_of_stage(kind, P, M, V, s);
  return peak;
}

std::vector<int> peak_inflight_microbatches(const Schedule& s) {
  std::vector<int> peak(s.stages, 0);
  for (int stage = 0; stage < s.stages; ++stage) {
    int inflight = 0;
    for (const Action& a : s.actions[stage]) {
      if (a.kind == ActionKind::forward) peak[stage] = std::max(peak[stage], ++inflight);
      // B (or zero-bubble's B-input) frees the activations; W only keeps small buffers.
      if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) --inflight;
    }
  }
  return peak;
}

std::string render_schedule(const Schedule& s, const CostModel& costs) {
  const SimulationResult sim = simulate_schedule(s, costs);
  size_t width = 2;
  for (const auto& row : sim.timeline)
    for (const auto& t : row) width = std::max(width, t.action.str().size());
  const int cells = static_cast<int>(std::lround(sim.makespan));
  std::string out =
      fmt::format("{}: P={} M={} V={}, step {:g}, bubble {:.1f}%\n", s.name, s.stages,
                  s.microbatches, s.virtual_stages, sim.makespan, 100.0 * sim.bubble_fraction);
  for (int stage = 0; stage < s.stages; ++stage) {
    std::vector<std::string> row(cells, std::string(".."));
    for (const auto& t : sim.timeline[stage]) {
      const int begin = static_cast<int>(std::lround(t.start));
      const int end = std::max(begin + 1, static_cast<int>(std::lround(t.end)));
      // A later cell of the same action: its letter in lower case, as the trace's timeline
      // fills an event ("B0 bb"); '=' there means communication on the wire.
      const std::string label = t.action.str();
      const std::string fill(2,
                             static_cast<char>(std::tolower(static_cast<unsigned char>(label[0]))));
      for (int c = begin; c < end && c < cells; ++c) row[c] = c == begin ? label : fill;
    }
    std::string line = fmt::format("stage {} |", stage);
    for (const auto& cell : row) line += fmt::format(" {:<{}}", cell, width);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace mgpu::pipeline
