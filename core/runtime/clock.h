// Time on one rank. Work happens on two lanes, like two CUDA streams: compute and comm. Each
// lane has a cursor: the time at which its next piece of work can start.
//  - modeled: cursors are virtual seconds advanced by the HardwareProfile's costs; the same
//    program gives the same timeline on any host and under any thread interleaving.
//  - wall: cursors are the steady clock (seconds since the world started); advancing is a no-op.
//  - cuda: like wall for host work; CUDA events time the streams (CUDA builds).
#pragma once
#include <algorithm>
#include <chrono>
#include <string>

namespace mgpu {

enum class ClockKind : uint8_t { modeled, wall, cuda };
ClockKind parse_clock_kind(const std::string& text);  // throws std::invalid_argument
const char* clock_name(ClockKind k);

class RankClock {
 public:
  using Epoch = std::chrono::steady_clock::time_point;
  explicit RankClock(ClockKind kind = ClockKind::modeled,
                     Epoch epoch = std::chrono::steady_clock::now())
      : kind_(kind), epoch_(epoch) {}

  ClockKind kind() const { return kind_; }
  bool modeled() const { return kind_ == ClockKind::modeled; }

  double compute_now() const { return modeled() ? compute_ : wall_now(); }
  double comm_now() const { return modeled() ? comm_ : wall_now(); }
  // When a comm operation issued now may start: after the comm lane is free and after the
  // compute issued so far (it may be producing the data being sent).
  double comm_issue_time() const { return std::max(compute_now(), comm_now()); }

  // Modeled: move a cursor forward (never back). Wall: time moves by itself, nothing to do.
  void advance_compute(double seconds) {
    if (modeled()) compute_ += seconds;
  }
  void wait_compute_until(double t) {
    if (modeled()) compute_ = std::max(compute_, t);
  }
  void wait_comm_until(double t) {
    if (modeled()) comm_ = std::max(comm_, t);
  }

  double wall_now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
  }
  Epoch epoch() const { return epoch_; }

 private:
  ClockKind kind_;
  Epoch epoch_;
  double compute_ = 0;
  double comm_ = 0;
};

}  // namespace mgpu
