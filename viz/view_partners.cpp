// Which events belong together, for click-select: a send and its matching recv, or every member
// of one collective call (same group and seq).
#include "viz/view_model.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace mgpu::viz {

using trace::Event;
using trace::Lane;

void TraceView::index_partners() {
  partner_group_.assign(trace_.events.size(), -1);
  // Collectives: every event with the same (group, seq) is a member of one collective call.
  std::map<std::pair<std::string, int64_t>, std::vector<int>> collectives;
  // Point-to-point: the k-th send from a to b (in time order) matches the k-th recv on b from a
  // (MPI's non-overtaking rule), per group.
  std::map<std::tuple<std::string, int, int>, std::pair<std::vector<int>, std::vector<int>>> p2p;
  for (int i = 0; i < static_cast<int>(trace_.events.size()); ++i) {
    const Event& e = trace_.events[i];
    const bool is_send = e.op == "send" || e.op == "isend";
    const bool is_recv = e.op == "recv" || e.op == "irecv";
    if ((is_send || is_recv) && e.peer >= 0) {
      auto& [sends, recvs] = p2p[{e.group, is_send ? e.rank : e.peer, is_send ? e.peer : e.rank}];
      (is_send ? sends : recvs).push_back(i);
    } else if (e.seq >= 0 && !e.op.empty()) {
      collectives[{e.group, e.seq}].push_back(i);
    }
  }
  auto by_start = [&](int a, int b) { return trace_.events[a].start < trace_.events[b].start; };
  for (auto& [key, pair] : p2p) {
    auto& [sends, recvs] = pair;
    std::stable_sort(sends.begin(), sends.end(), by_start);
    std::stable_sort(recvs.begin(), recvs.end(), by_start);
    for (size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k) {
      partner_group_[sends[k]] = partner_group_[recvs[k]] = static_cast<int>(groups_.size());
      groups_.push_back({sends[k], recvs[k]});
    }
  }
  for (auto& [key, members] : collectives) {
    for (int i : members) partner_group_[i] = static_cast<int>(groups_.size());
    groups_.push_back(std::move(members));
  }
}

std::vector<int> TraceView::partners(int i) const {
  std::vector<int> out;
  if (i < 0 || i >= static_cast<int>(partner_group_.size()) || partner_group_[i] < 0) return out;
  for (int j : groups_[partner_group_[i]]) {
    if (j != i) out.push_back(j);
  }
  return out;
}
}  // namespace mgpu::viz
