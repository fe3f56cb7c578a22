// trace_compare A.json B.json: exit 0 when two Chrome traces written by mgpu hold the same run,
// event for event (name, category, rank, lane, ts, dur, wait, step, peer, bytes, sent_bytes, group,
// seq, ...), memory sample for memory sample, with the same metadata; otherwise print the first
// difference and exit 1. The mpirun tests use it to hold a run under mpirun (one process per
// rank, trace merged on rank 0) to the thread run's modeled timeline, exactly.
#include <cstdio>
#include <exception>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/trace/chrome_trace.h"

using namespace mgpu;

namespace {

std::string describe(const trace::Event& e) {
  return fmt::format(
      "rank {} lane {} {} [{}] ts={:.17g} dur={:.17g} wait={:.17g} step={} mb={} layer={} "
      "chunk={} peer={} bytes={} sent_bytes={} flops={:.17g} group={} op={} seq={}",
      e.rank, static_cast<int>(e.lane), e.name, e.cat, e.start, e.dur, e.wait, e.step, e.microbatch,
      e.layer, e.chunk, e.peer, e.bytes, e.sent_bytes, e.flops, e.group, e.op, e.seq);
}

std::string describe(const trace::CounterSample& c) {
  return fmt::format("rank {} t={:.17g} bytes=[{}]", c.rank, c.time, fmt::join(c.bytes, ", "));
}

template <class T>
bool same_sequence(const char* what, const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (!(a[i] == b[i])) {
      fmt::print(stderr, "{} #{} differs:\n  A: {}\n  B: {}\n", what, i, describe(a[i]),
                 describe(b[i]));
      return false;
    }
  if (a.size() != b.size()) {
    const auto& longer = a.size() > b.size() ? a : b;
    fmt::print(stderr, "{}: A has {}, B has {}; the first extra one ({}): {}\n", what, a.size(),
               b.size(), a.size() > b.size() ? "A" : "B",
               describe(longer[std::min(a.size(), b.size())]));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: trace_compare A.json B.json\n");
    return 2;
  }
  try {
    const trace::Trace a = trace::read_chrome_trace(argv[1]);
    const trace::Trace b = trace::read_chrome_trace(argv[2]);
    bool same = true;
    if (a.num_ranks != b.num_ranks) {
      fmt::print(stderr, "ranks: A has {}, B has {}\n", a.num_ranks, b.num_ranks);
      same = false;
    }
    same = same_sequence("event", a.events, b.events) && same;
    same = same_sequence("memory sample", a.counters, b.counters) && same;
    if (a.metadata != b.metadata) {
      fmt::print(stderr, "metadata differs:\n  A: {}\n  B: {}\n", a.metadata.dump(),
                 b.metadata.dump());
      same = false;
    }
    if (!same) return 1;
    fmt::print("traces equal: {} events, {} memory samples, {} ranks\n", a.events.size(),
               a.counters.size(), a.num_ranks);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
