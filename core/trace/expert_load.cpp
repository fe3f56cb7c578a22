#include "core/trace/expert_load.h"

#include <algorithm>

#include "core/trace/analysis.h"

namespace mgpu::trace {

namespace {

bool in_window(const Event& e, const Interval& window) {
  return e.start >= window.begin && e.start < window.end;
}

}  // namespace

bool is_dispatch(const Event& e) {
  return e.lane == Lane::comm && e.name.starts_with("dispatch");
}

bool is_combine(const Event& e) {
  return e.lane == Lane::comm && e.name.starts_with("combine");
}

std::vector<int64_t> ExpertLoad::total() const {
  std::vector<int64_t> sum;
  for (const auto& counts : per_rank) {
    sum.resize(std::max(sum.size(), counts.size()), 0);
    for (size_t e = 0; e < counts.size(); ++e) sum[e] += counts[e];
  }
  return sum;
}

std::vector<ExpertLoad> expert_loads(const Trace& trace, std::optional<int> step) {
  const Interval window = analysis_window(trace, step);
  std::vector<ExpertLoad> loads;
  for (const Event& e : trace.events) {
    if (e.counts.empty() || e.name != "dispatch counts" || !in_window(e, window)) continue;
    auto it = std::find_if(loads.begin(), loads.end(),
                           [&](const ExpertLoad& l) { return l.layer == e.layer; });
    if (it == loads.end()) {
      loads.push_back({e.layer, std::vector<std::vector<int64_t>>(
                                    static_cast<size_t>(std::max(trace.num_ranks, e.rank + 1)))});
      it = loads.end() - 1;
    }
    auto& mine = it->per_rank[static_cast<size_t>(e.rank)];
    if (mine.empty()) mine = e.counts;  // a full recompute's second plan routes the same
  }
  std::sort(loads.begin(), loads.end(),
            [](const ExpertLoad& a, const ExpertLoad& b) { return a.layer < b.layer; });
  return loads;
}

int64_t exchange_sent_bytes(const Trace& trace, std::optional<int> step, int rank,
                            const std::string& exchange, int layer) {
  const Interval window = analysis_window(trace, step);
  int64_t bytes = 0;
  for (const Event& e : trace.events)
    if (e.rank == rank && e.op == "all_to_all_v" && in_window(e, window) &&
        (exchange.empty() || e.name == exchange) && (layer < 0 || e.layer == layer))
      bytes += e.sent_bytes;
  return bytes;
}

}  // namespace mgpu::trace
