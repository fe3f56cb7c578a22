// The schedule generators. Each one only decides the ORDER of compute on every stage; the
// messages are added afterwards by with_communication, the same way for all of them:
//   forward of (mb, chunk):   recv_activation from the previous virtual stage, F, send_activation
//   backward of (mb, chunk):  recv_grad from the next virtual stage, B, send_grad
//   backward_weight:          purely local, no messages
#include "core/parallel/pipeline/schedule.h"
#include "core/theory/schedule_kind.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (moved here in fmt 11)

#include <algorithm>
#include <stdexcept>

namespace mgpu::pipeline {

namespace {

// The messages a compute needs before it runs, and the ones it sends after.
void add_recv(const Schedule& s, int stage, const Action& a, std::vector<Action>& out) {
  const int v = s.virtual_stage(stage, a.chunk), last = s.num_virtual_stages() - 1;
  if (a.kind == ActionKind::forward && v > 0)
    out.push_back({ActionKind::recv_activation, a.microbatch, a.chunk,
                   s.neighbour(stage, a.chunk, -1).first});
  const bool is_b = a.kind == ActionKind::backward || a.kind == ActionKind::backward_input;
  if (is_b && v < last)
    out.push_back(
        {ActionKind::recv_grad, a.microbatch, a.chunk, s.neighbour(stage, a.chunk, +1).first});
}

void add_send(const Schedule& s, int stage, const Action& a, std::vector<Action>& out) {
  const int v = s.virtual_stage(stage, a.chunk), last = s.num_virtual_stages() - 1;
  if (a.kind == ActionKind::forward && v < last)
    out.push_back({ActionKind::send_activation, a.microbatch, a.chunk,
                   s.neighbour(stage, a.chunk, +1).first});
  const bool is_b = a.kind == ActionKind::backward || a.kind == ActionKind::backward_input;
  if (is_b && v > 0)
    out.push_back(
        {ActionKind::send_grad, a.microbatch, a.chunk, s.neighbour(stage, a.chunk, -1).first});
}

}  // namespace

// A compute marked with_next forms a group with the compute after it (DualPipe's F&B): the
// group's receives come first, then both computes, then the group's sends.
Schedule with_communication(std::string name, int stages, int microbatches, int virtual_stages,
                            std::vector<std::vector<Action>> compute, Placement placement) {
  Schedule schedule{std::move(name), stages, microbatches, virtual_stages, {}, placement};
  schedule.actions.resize(stages);
  for (int stage = 0; stage < stages; ++stage) {
    auto& out = schedule.actions[stage];
    const auto& list = compute[stage];
    for (size_t first = 0; first < list.size();) {
      size_t end = first + 1;
      while (end < list.size() && list[end - 1].with_next) ++end;
      for (size_t i = first; i < end; ++i) add_recv(schedule, stage, list[i], out);
      for (size_t i = first; i < end; ++i) out.push_back(list[i]);
      for (size_t i = first; i < end; ++i) add_send(schedule, stage, list[i], out);
      first = end;
    }
  }
  return schedule;
}

std::optional<MessageKey> message_key(const Schedule& schedule, int stage, const Action& a) {
  const int v = schedule.virtual_stage(stage, a.chunk);
  switch (a.kind) {
    case ActionKind::send_activation:
      return MessageKey{false, a.microbatch, stage, a.peer, v + 1};
    case ActionKind::recv_activation:
      return MessageKey{false, a.microbatch, a.peer, stage, v};
    case ActionKind::send_grad:
      return MessageKey{true, a.microbatch, stage, a.peer, v - 1};
    case ActionKind::recv_grad:
      return MessageKey{true, a.microbatch, a.peer, stage, v};
    default:
      return std::nullopt;
  }
}

// Interleaved 1F1B (Megatron-LM): each stage holds V model chunks, so a micro-batch visits every
// stage V times. Work goes in rounds of micro-batches: forward chunk 0 of the round's
// micro-batches, then chunk 1 of the same ones, ... (backward visits chunks in reverse). Megatron's
// rounds are exactly P, so M had to be a multiple of P; like PyTorch we lift that. A round only
// needs at least P micro-batches: a micro-batch comes back to stage 0 for its next chunk after
// crossing all P stages, and by then stage 0 has forwarded the rest of the round. So M splits
// into floor(M/P) rounds of g >= P, and warmup is 2(P-s-1) + (V-1)g_0 chunk-forwards (the first
// round's). The bubble shrinks by V at the price of V times more messages.
std::vector<int> interleaved_round_sizes(int stages, int microbatches) {
  const int rounds = std::max(1, microbatches / stages);
  std::vector<int> sizes(rounds, microbatches / rounds);
  for (int r = 0; r < microbatches % rounds; ++r) ++sizes[r];
  return sizes;
}

Schedule interleaved_1f1b_schedule(int stages, int microbatches, int virtual_stages) {
  const int P = stages, V = virtual_stages, total = microbatches * V;
  const std::vector<int> rounds = interleaved_round_sizes(P, microbatches);
  // The k-th forward (or backward) on any stage -> (micro-batch, chunk): round by round, chunk by
  // chunk (backwards from the last chunk), the round's micro-batches in order.
  std::vector<std::pair<int, int>> forward_order, backward_order;
  for (int first = 0; int size : rounds) {
    for (int c = 0; c < V; ++c)
      for (int i = 0; i < size; ++i) {
        forward_order.emplace_back(first + i, c);
        backward_order.emplace_back(first + i, V - 1 - c);
      }
    first += size;
  }
  std::vector<std::vector<Action>> compute(P);
  for (int stage = 0; stage < P; ++stage) {
    auto& list = compute[stage];
    const int warmup = std::min((P - stage - 1) * 2 + (V - 1) * rounds[0], total);
    for (int k = 0; k < warmup; ++k)
      list.push_back(forward(forward_order[k].first, forward_order[k].second));
    for (int k = 0; k < total - warmup; ++k) {
      auto [fmb, fchunk] = forward_order[k + warmup];
      list.push_back(forward(fmb, fchunk));
      auto [bmb, bchunk] = backward_order[k];
      list.push_back(backward(bmb, bchunk));
    }
    for (int k = total - warmup; k < total; ++k)
      list.push_back(backward(backward_order[k].first, backward_order[k].second));
  }
  return with_communication(theory::schedule_name(theory::ScheduleKind::interleaved), P,
                            microbatches, V, std::move(compute));
}

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): split the backward into B (grad of
// the input, which the previous stage is waiting for) and W (grad of the weights, which nobody is
// waiting for). F and B keep 1F1B's order, so peak activations equal 1F1B's; stage s lets its W
// lag s micro-batches behind its B, and the deferred W's fill the cooldown bubble.
Schedule zb_h1_schedule(int stages, int microbatches) {
  std::vector<std::vector<Action>> compute(stages);
  for (int stage = 0; stage < stages; ++stage) {
    auto& list = compute[stage];
    const int warmup = std::min(stages - stage - 1, microbatches), lag = stage;
    int next_weight = 0;
    auto after_backward = [&](int mb) {
      list.push_back(backward_input(mb));
      if (mb >= lag) list.push_back(backward_weight(next_weight++));
    };
    for (int mb = 0; mb < warmup; ++mb) list.push_back(forward(mb));
    for (int i = 0; i < microbatches - warmup; ++i) {
      list.push_back(forward(warmup + i));
      after_backward(i);
    }
    for (int mb = microbatches - warmup; mb < microbatches; ++mb) after_backward(mb);
    while (next_weight < microbatches) list.push_back(backward_weight(next_weight++));
  }
  return with_communication(theory::schedule_name(theory::ScheduleKind::zb_h1), stages,
                            microbatches, 1, std::move(compute));
}

// Naive model parallelism: one batch (M = 1) walks forward through the stages and back; at any
// moment exactly one stage works, so the bubble is (P-1)/P.
Schedule naive_model_parallel_schedule(int stages) {
  std::vector<std::vector<Action>> compute(stages, {forward(0), backward(0)});
  return with_communication(theory::schedule_name(theory::ScheduleKind::naive), stages, 1, 1,
                            std::move(compute));
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const theory::ScheduleTraits& t : theory::all_schedules()) all.emplace_back(t.name);
    return all;
  }();
  return names;
}

Schedule make_schedule(const std::string& name, int stages, int microbatches, int virtual_stages,
                       const PipelineSeams& seams) {
  const auto kind = theory::find_schedule(name);
  if (!kind)
    throw std::invalid_argument(fmt::format("unknown pipeline schedule '{}': use one of {}", name,
                                            fmt::join(schedule_names(), ", ")));
  using K = theory::ScheduleKind;
  switch (*kind) {
    case K::naive:
      return naive_model_parallel_schedule(stages);
    case K::gpipe:
      return gpipe_schedule(stages, microbatches, seams);
    case K::one_f_one_b:
      return one_f_one_b_schedule(stages, microbatches, seams);
    case K::interleaved:
      return interleaved_1f1b_schedule(stages, microbatches, virtual_stages);
    case K::zb_h1:
      return zb_h1_schedule(stages, microbatches);
    case K::zbv:
      return zbv_schedule(stages, microbatches);
    case K::dualpipev:
      return dualpipev_schedule(stages, microbatches);
    case K::dualpipe:
      return dualpipe_schedule(stages, microbatches);
  }
  throw std::logic_error("make_schedule: a registered kind without a generator");
}

}  // namespace mgpu::pipeline
