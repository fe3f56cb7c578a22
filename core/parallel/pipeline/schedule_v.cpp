// V-shaped schedules: every stage holds two model chunks, chunk 0 = virtual stage s on the way
// down and chunk 1 = virtual stage 2P-1-s on the way back up (Placement::v_shape). Stage 0 holds
// the first and the last layers; the turn at stage P-1 is a local hand-over, not a message.
// Both generators only decide each stage's compute ORDER; with_communication adds the messages.
#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>

#include "core/parallel/pipeline/schedule.h"
#include "core/theory/schedule_kind.h"

namespace mgpu::pipeline {

namespace {

// One stage's compute list with per-chunk counters: the k-th F (or B) of a chunk is micro-batch k.
class StageOrder {
 public:
  void f(int chunk, bool with_next = false) {
    Action a = forward(forwards_[chunk]++, chunk);
    a.with_next = with_next;
    list_.push_back(a);
  }
  // zero_bubble: split into B (now) and W (queued for w()); otherwise the full backward.
  void b(int chunk, bool zero_bubble = false) {
    const int mb = backwards_[chunk]++;
    if (!zero_bubble) {
      list_.push_back(backward(mb, chunk));
      return;
    }
    list_.push_back(backward_input(mb, chunk));
    weights_.push_back(backward_weight(mb, chunk));
  }
  // The oldest deferred weight gradient (of `chunk`, or of either).
  void w(int chunk = -1) {
    auto it = std::find_if(weights_.begin(), weights_.end(),
                           [&](const Action& a) { return chunk < 0 || a.chunk == chunk; });
    list_.push_back(*it);
    weights_.erase(it);
  }
  bool has_weights(int chunk) const {
    return std::any_of(weights_.begin(), weights_.end(),
                       [&](const Action& a) { return a.chunk == chunk; });
  }
  int forwards(int chunk) const { return forwards_[chunk]; }
  int pending_weights() const { return static_cast<int>(weights_.size()); }
  std::vector<Action> take() { return std::move(list_); }

 private:
  std::vector<Action> list_;
  int forwards_[2] = {0, 0}, backwards_[2] = {0, 0};
  std::deque<Action> weights_;
};

}  // namespace

// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv:2401.10241, section 6), in the
// phase structure PyTorch's ScheduleZBVZeroBubble uses. Stage s: 2(P-s)-1 chunk-0 forwards;
// s pairs F(chunk 1), F(chunk 0); P-s rounds F B W on chunk 1; then the steady state
// F B W on chunk 0 and on chunk 1 until every forward is done; the cooldown runs the remaining
// B's (W's of the later ones interleaved, then all left over). Every stage peaks at 2P chunk
// activations = P whole-stage micro-batches, 1F1B's stage 0, and the only bubble left is the
// ramp: stage P-1 cannot start before P-1 chunk forwards have run above it.
Schedule zbv_schedule(int stages, int microbatches) {
  const int P = stages, M = microbatches;
  std::vector<std::vector<Action>> compute(P);
  for (int s = 0; s < P; ++s) {
    StageOrder o;
    for (int i = 0; i < 2 * (P - s) - 1; ++i) o.f(0);
    for (int i = 0; i < s; ++i) o.f(1), o.f(0);
    for (int i = 0; i < P - s; ++i) o.f(1), o.b(1, true), o.w();
    while (o.forwards(1) < o.forwards(0) || o.forwards(0) < M) {
      if (o.forwards(0) < M) o.f(0);
      o.b(0, true), o.w(), o.f(1), o.b(1, true), o.w();
    }
    // Cooldown: the B's first (they are on the critical path), W's fill behind them.
    for (int i = 0; i < s; ++i) o.b(0, true), o.b(1, true);
    for (int i = 0; i < P - s; ++i) o.b(0, true), o.w(0);
    while (o.has_weights(1)) o.w(1);
    while (o.has_weights(0)) o.w(0);
    compute[s] = o.take();
  }
  return with_communication(theory::schedule_name(theory::ScheduleKind::zbv), P, M, 2,
                            std::move(compute), Placement::v_shape);
}

// DualPipeV: DualPipe (DeepSeek-V3 technical report, arXiv:2412.19437; github.com/deepseek-ai/
// DualPipe) "cut in half" into a V, one parameter copy, micro-batches from one end. The eight
// phases of DualPipe's dualpipev.py, per stage s:
//   1 2(P-s-1) F0   2 s+1 pairs F0 F1   3 P-s-1 rounds B1 W F1 (zero bubble)
//   4 M-2P+s+1 rounds F0&B1, F1&B0      5 P-s-1 rounds B1, F1&B0
//   6 s+1 rounds B1 B0 (the second half split into B and W)   7 P-s-1 rounds W B0   8 the W's left
// "F&B" is a forward and a backward of different micro-batches issued together: in DualPipe they
// overlap one's communication with the other's compute. Here a stage has one compute stream, so
// the pair costs F + B; what stays is that both inputs are received first (with_next).
Schedule dualpipev_schedule(int stages, int microbatches) {
  const int P = stages, M = microbatches;
  std::vector<std::vector<Action>> compute(P);
  for (int s = 0; s < P; ++s) {
    StageOrder o;
    const bool last = s == P - 1;
    for (int i = 0; i < 2 * (P - s - 1); ++i) o.f(0);
    for (int i = 0; i <= s; ++i) o.f(0), o.f(1);
    for (int i = 0; i < P - s - 1; ++i) o.b(1, true), o.w(), o.f(1);
    for (int i = 0; i < M - 2 * P + s + 1; ++i) {
      // At the tip the first F0 feeds its own F1 just after: DualPipe does not pair them either.
      o.f(0, /*with_next=*/!(i == 0 && last)), o.b(1);
      o.f(1, true), o.b(0);
    }
    for (int i = 0; i < P - s - 1; ++i) o.b(1), o.f(1, true), o.b(0);
    bool zero_bubble = false;
    for (int i = 0; i <= s; ++i) {
      if (i == (s + 1) / 2 && s % 2 == 1) zero_bubble = true;
      o.b(1, zero_bubble);
      if (i == (s + 1) / 2 && s % 2 == 0) zero_bubble = true;
      o.b(0, zero_bubble);
    }
    for (int i = 0; i < P - s - 1; ++i) o.w(), o.b(0, true);
    while (o.pending_weights() > 0) o.w();
    compute[s] = o.take();
  }
  return with_communication(theory::schedule_name(theory::ScheduleKind::dualpipev), P, M, 2,
                            std::move(compute), Placement::v_shape);
}

int min_microbatches(const std::string& name, int stages) {
  switch (theory::find_schedule(name).value_or(theory::ScheduleKind::one_f_one_b)) {
    case theory::ScheduleKind::zbv:
      return 2 * stages - 1;  // stage 0's warmup: 2P-1 forwards of chunk 0
    case theory::ScheduleKind::dualpipev:
      return 2 * stages;  // phase 4 needs M >= 2P - s - 1 on every stage, and DualPipe asks 2P
    case theory::ScheduleKind::dualpipe:
      return 2 * stages;  // DualPipeV's 2(P/2) per direction
    default:
      return 1;
  }
}

}  // namespace mgpu::pipeline
