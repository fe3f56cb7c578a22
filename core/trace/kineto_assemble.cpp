// The Kineto reader's last stage (see kineto_reader.h for the mapping it completes).
#include "core/trace/kineto_assemble.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "core/runtime/allocator.h"

namespace mgpu::trace::kineto {

namespace {

constexpr double kSecondsPerMicro = 1e-6;
constexpr double kUnknown = -1;

// Per file, its place 0..n-1 in the trace: by distributedInfo.rank when every file has one,
// else the order the files were given.
std::vector<int> trace_ranks(const std::vector<RawRank>& files) {
  std::vector<int> order(files.size());
  std::iota(order.begin(), order.end(), 0);
  const bool all_known =
      std::all_of(files.begin(), files.end(), [](const RawRank& f) { return f.rank >= 0; });
  if (!all_known) return order;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return files[a].rank < files[b].rank; });
  for (size_t i = 1; i < order.size(); ++i) {
    const RawRank& a = files[order[i - 1]];
    const RawRank& b = files[order[i]];
    if (a.rank == b.rank)
      throw TraceFormatError(
          fmt::format("{} and {} are both rank {} (distributedInfo.rank): give "
                      "one file per rank",
                      a.source, b.source, a.rank));
  }
  std::vector<int> place(files.size());
  for (size_t i = 0; i < order.size(); ++i) place[order[i]] = static_cast<int>(i);
  return place;
}

Event comm_from(const CommSpan& c) {
  Event e;
  e.name = c.name;
  e.cat = trace::cat::comm;
  e.lane = Lane::comm;
  e.start = c.ts;
  e.dur = c.dur;
  e.op = c.op;
  e.bytes = c.bytes;
  e.group = c.group;
  return e;
}

// A job without GPU activity: the CPU ops no other op (or communication) on their thread
// contains are compute; the gloo:/nccl: record functions are communication, with the collective
// and bytes of the record_param_comms op that precedes each when it has none of its own.
std::vector<Event> cpu_only_events(const RawRank& f) {
  std::vector<Event> out;
  std::vector<const CommSpan*> params;  // record_param_comms ops, in start order
  for (const CommSpan& c : f.comm)
    if (c.params_only) params.push_back(&c);
  std::sort(params.begin(), params.end(),
            [](const CommSpan* a, const CommSpan* b) { return a->ts < b->ts; });
  for (const CommSpan& c : f.comm) {
    if (c.params_only) continue;
    Event e = comm_from(c);
    auto after = std::upper_bound(params.begin(), params.end(), c.ts,
                                  [](double ts, const CommSpan* p) { return ts < p->ts; });
    if (after != params.begin() && e.bytes == 0) {
      const CommSpan& p = **std::prev(after);
      e.bytes = p.bytes;
      if (e.op.empty()) e.op = p.op;
      if (e.group.empty()) e.group = p.group;
    }
    out.push_back(std::move(e));
  }
  struct Item {
    double ts, end;
    uint32_t thread;
    int cpu;  // index into f.cpu, or -1 for communication
  };
  std::vector<Item> items;
  for (size_t i = 0; i < f.cpu.size(); ++i)
    items.push_back({f.cpu[i].ts, f.cpu[i].ts + f.cpu[i].dur, f.cpu[i].thread, int(i)});
  for (const CommSpan& c : f.comm)
    if (!c.params_only) items.push_back({c.ts, c.ts + c.dur, c.thread, -1});
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.ts != b.ts) return a.ts < b.ts;
    return a.end != b.end ? a.end > b.end : a.cpu < b.cpu;  // the outer op first
  });
  double open_until = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0 && items[i].thread != items[i - 1].thread)
      open_until = -std::numeric_limits<double>::infinity();
    if (items[i].ts < open_until) continue;  // inside the op before it
    open_until = items[i].end;
    if (items[i].cpu < 0) continue;
    const CpuSpan& s = f.cpu[items[i].cpu];
    Event e;
    e.name = f.names[s.name];
    e.cat = trace::cat::compute;
    e.start = s.ts;
    e.dur = s.dur;
    out.push_back(std::move(e));
  }
  return out;
}

// A step ends when the last GPU operation launched inside its ProfilerStep range does (the CPU
// ranges of one thread do not overlap, so each launch falls in at most one).
void add_steps(const RawRank& f, const std::vector<double>& launch, std::vector<Event>& events) {
  std::vector<StepRange> steps = f.steps;
  std::sort(steps.begin(), steps.end(),
            [](const StepRange& a, const StepRange& b) { return a.ts < b.ts; });
  std::vector<double> end(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) end[s] = steps[s].end;
  for (size_t i = 0; i < launch.size(); ++i) {
    if (launch[i] == kUnknown) continue;
    auto after = std::upper_bound(steps.begin(), steps.end(), launch[i],
                                  [](double t, const StepRange& s) { return t < s.ts; });
    if (after == steps.begin()) continue;
    const size_t s = static_cast<size_t>(after - steps.begin()) - 1;
    if (launch[i] <= steps[s].end) end[s] = std::max(end[s], events[i].end());
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    Event e;
    e.name = fmt::format("ProfilerStep#{}", steps[s].step);
    e.cat = trace::cat::step;
    e.lane = Lane::step;
    e.step = steps[s].step;
    e.start = steps[s].ts;
    e.dur = end[s] - steps[s].ts;
    events.push_back(std::move(e));
  }
}

struct RankEvents {
  std::vector<Event> events;  // microseconds, unshifted
  std::vector<double> launch;
  double earliest = std::numeric_limits<double>::infinity();
  double first_step = std::numeric_limits<double>::infinity();
  double latest = -std::numeric_limits<double>::infinity();
};

Event gpu_event(const GpuOp& g, const RawRank& f) {
  static constexpr const char* kCategory[] = {trace::cat::compute, trace::cat::comm,
                                              trace::cat::memory};
  Event e;
  e.name = f.names[g.name];
  e.cat = kCategory[static_cast<size_t>(g.kind)];
  e.lane = g.kind == GpuOp::Kind::comm ? Lane::comm : Lane::compute;
  e.start = g.ts;
  e.dur = g.dur;
  e.bytes = g.bytes;
  e.op = f.names[g.op];
  e.group = f.names[g.group];
  return e;
}

// The GPU operations as events, with when the host call that launched each returned.
void gpu_events(RawRank& f, RankEvents& r) {
  r.events.reserve(f.gpu.size() + f.steps.size());
  r.launch.reserve(f.gpu.size() + f.steps.size());
  for (const GpuOp& g : f.gpu) {
    r.events.push_back(gpu_event(g, f));
    const auto it = g.correlation >= 0 ? f.launch_end.find(g.correlation) : f.launch_end.end();
    r.launch.push_back(it == f.launch_end.end() ? kUnknown : it->second);
  }
  f.gpu = {};
}

RankEvents rank_events(RawRank& f) {
  RankEvents r;
  if (f.gpu.empty())
    r.events = cpu_only_events(f);
  else
    gpu_events(f, r);
  r.launch.resize(r.events.size(), kUnknown);
  add_steps(f, r.launch, r.events);
  r.launch.resize(r.events.size(), kUnknown);
  r.earliest = f.earliest;
  for (const StepRange& s : f.steps) r.first_step = std::min(r.first_step, s.ts);
  for (const Event& e : r.events) r.latest = std::max(r.latest, e.end());
  for (const MemorySample& m : f.memory) r.latest = std::max(r.latest, m.ts);
  return r;
}

// Microseconds to subtract from each rank's times (see kineto_reader.h, Align).
std::vector<double> clock_offsets(const std::vector<RankEvents>& ranks, bool by_first_step) {
  std::vector<double> offset(ranks.size(), 0);
  double lead = std::numeric_limits<double>::infinity();  // min over ranks of earliest - origin
  for (const RankEvents& r : ranks)
    if (std::isfinite(r.earliest))
      lead = std::min(lead, r.earliest - (by_first_step ? r.first_step : 0));
  if (!std::isfinite(lead)) return offset;
  for (size_t i = 0; i < ranks.size(); ++i)
    offset[i] = (by_first_step ? ranks[i].first_step : 0) + lead;
  return offset;
}

void add_memory(const RawRank& f, int rank, double offset, Trace& trace) {
  const bool gpu =
      std::any_of(f.memory.begin(), f.memory.end(), [](const MemorySample& m) { return m.gpu; });
  for (const MemorySample& m : f.memory) {
    if (m.gpu != gpu) continue;
    CounterSample s;
    s.rank = rank;
    s.time = (m.ts - offset) * kSecondsPerMicro;
    s.bytes[static_cast<size_t>(MemCategory::workspace)] = m.bytes;
    trace.counters.push_back(s);
  }
}

// Moves `from` to the end of `to`. The first rank's vector is taken whole, so a one-rank trace
// (the biggest files) holds its events once, never twice.
template <class T>
void append(std::vector<T>&& from, std::vector<T>& to, size_t total) {
  if (to.empty()) {
    to = std::move(from);
    to.reserve(total);
    return;
  }
  std::move(from.begin(), from.end(), std::back_inserter(to));
  from = {};
}

}  // namespace

KinetoTrace assemble(std::vector<RawRank> files, const KinetoOptions& options) {
  const std::vector<int> place = trace_ranks(files);
  std::vector<RankEvents> ranks;
  size_t total = 0;
  for (RawRank& f : files) {
    ranks.push_back(rank_events(f));
    total += ranks.back().events.size();
    f.cpu = {}, f.comm = {}, f.launch_end = {};  // done with: free before the copy below
  }
  const bool by_step = options.align == KinetoOptions::Align::first_step &&
                       std::all_of(ranks.begin(), ranks.end(), [](const RankEvents& r) {
                         return std::isfinite(r.first_step) || !std::isfinite(r.earliest);
                       });
  const std::vector<double> offset = clock_offsets(ranks, by_step);
  KinetoTrace out;
  out.trace.num_ranks = static_cast<int>(files.size());
  out.host.resize(files.size());
  nlohmann::json sources(files.size(), nullptr), original(files.size(), nullptr);
  for (size_t i = 0; i < files.size(); ++i) {  // in rank order
    sources[place[i]] = files[i].source;
    original[place[i]] = files[i].rank;
  }
  std::vector<size_t> file_of(files.size());  // in rank order, so events come rank by rank
  for (size_t i = 0; i < files.size(); ++i) file_of[place[i]] = i;
  for (const size_t i : file_of) {
    RankEvents& r = ranks[i];
    if (r.latest - offset[i] > kMaxTraceSpan / kSecondsPerMicro)
      throw TraceFormatError(
          fmt::format("{}: events span {:g} s after clock alignment; the reader "
                      "takes at most {:g} s",
                      files[i].source, (r.latest - offset[i]) * 1e-6, kMaxTraceSpan));
    for (size_t k = 0; k < r.events.size(); ++k) {
      Event& e = r.events[k];
      e.rank = place[i];
      e.start = (e.start - offset[i]) * kSecondsPerMicro;
      e.dur *= kSecondsPerMicro;
      double& l = r.launch[k];
      l = l == kUnknown ? kUnknown : (l - offset[i]) * kSecondsPerMicro;
    }
    append(std::move(r.events), out.trace.events, total);
    append(std::move(r.launch), out.launch_end, total);
    r = RankEvents{};
    out.host[place[i]] = files[i].host;
    add_memory(files[i], place[i], offset[i], out.trace);
  }
  out.trace.metadata = {{"source", "kineto"},
                        {"clock", "PyTorch profiler"},
                        {"files", sources},
                        {"distributed_ranks", original},
                        {"align", by_step ? "first-step" : "clock"}};
  int64_t microbatches = 0;  // a pipeline's annotations: analyze then shows the bubble
  for (const RawRank& f : files) microbatches += f.microbatch_annotations;
  out.trace.metadata["microbatch_annotations"] = microbatches;
  return out;
}

}  // namespace mgpu::trace::kineto
