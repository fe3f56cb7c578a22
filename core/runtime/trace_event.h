// The trace data model shared by the runtime (which records), the writer/reader (Chrome Trace
// Event JSON), the analysis and the dashboard. Times are seconds from the start of the run.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mgpu::trace {

// One rank's timeline has a lane per kind of work; Chrome trace tid = lane.
enum class Lane : uint8_t { compute = 0, comm = 1, step = 2 };
constexpr int kNumLanes = 3;
const char* lane_name(Lane l);  // "compute", "comm", "step"

// Event categories used across the project ("cat" in the JSON).
namespace cat {
inline constexpr const char* forward = "forward";
inline constexpr const char* backward = "backward";
inline constexpr const char* backward_weight = "backward_weight";  // zero-bubble W pass
inline constexpr const char* optimizer = "optimizer";
inline constexpr const char* compute = "compute";  // any other compute (loss, data, ...)
inline constexpr const char* comm = "comm";        // collectives and point-to-point
inline constexpr const char* step = "step";        // one training step, on the step lane
// a device memory copy or set (real traces: cudaMemcpy/Memset), on the compute lane
inline constexpr const char* memory = "memory";
// activation checkpointing: a block's forward re-run inside its backward
inline constexpr const char* recompute = "recompute";
}  // namespace cat

struct Event {
  std::string name;  // "fwd mb3", "all_reduce", "send", ...
  std::string cat;   // one of trace::cat
  int rank = 0;
  Lane lane = Lane::compute;
  double start = 0;  // seconds
  double dur = 0;    // seconds
  // args (absent when negative / zero / empty)
  int microbatch = -1;
  int layer = -1;
  int chunk = -1;  // model chunk (interleaved pipeline)
  int step = -1;
  int peer = -1;      // send/recv partner
  int64_t bytes = 0;  // bytes moved (comm) or touched (compute)
  // Comm events: the bytes this rank itself put on the wire for the operation, counted in the
  // backend's send path (a ring all-reduce of S bytes sends 2(N-1)/N x S; a recv sends 0).
  int64_t sent_bytes = 0;
  // Comm events: the part of `dur` (seconds) this rank spent waiting for a partner's message to
  // be sent (a receive posted before its sender got there); the rest of `dur` moved bytes.
  // Modeled clock: always; wall clock: threads only (they share one clock); else 0.
  double wait = 0;
  double flops = 0;
  std::string group;  // process group, e.g. "world", "dp0", "pp1"
  std::string op;     // collective kind: "all_reduce", "send", "recv", ...
  int64_t seq = -1;   // per-group collective sequence number (links members together)
  // Per-item counts an event reports (an expert exchange's routing: kept tokens per expert of
  // this rank, in expert order); empty for every other event.
  std::vector<int64_t> counts;

  double end() const { return start + dur; }
  bool operator==(const Event&) const = default;
};

// Memory by category on one rank at one instant ("C" events).
struct CounterSample {
  int rank = 0;
  double time = 0;
  std::array<int64_t, 6> bytes{};  // indexed by MemCategory
  bool operator==(const CounterSample&) const = default;
};

// One communication on a rank's comm lane, as every backend records it: `op` is the collective's
// kind or "send"/"recv", `sent_bytes` what this rank itself put on the wire for it. The caller
// adds what only it knows (a point-to-point peer, a collective's seq). `wait`: see Event::wait.
Event comm_event(const char* op, double start, double end, int64_t bytes, int64_t sent_bytes,
                 const std::string& group, double wait = 0);

struct Trace {
  // lesson, config, clock ("modeled"|"wall"|"cuda"), profile, predictions{...}, num_ranks
  nlohmann::json metadata = nlohmann::json::object();
  int num_ranks = 0;
  std::vector<Event> events;
  std::vector<CounterSample> counters;
};

}  // namespace mgpu::trace
