// The group-wide steps of a thread world: the check that every member calls the same
// collective, and the rendezvous that gives every member all members' values (split, counts).
#include "core/comm/local/local_world.h"

#include <algorithm>

#include <fmt/format.h>

namespace mgpu::comm::local {

void LocalWorld::check_collective(const std::string& group_key, const std::string& group_name,
                                  int64_t seq, int members, int world_rank,
                                  const std::string& call) {
  auto lock = lock_world();
  throw_if_stopped_locked();
  auto key = std::make_pair(group_key, seq);
  CollectiveCalls& entry = collectives_[key];
  entry.calls.emplace_back(world_rank, call);
  if (entry.calls.front().second != call) {
    std::string message =
        fmt::format("collective #{} in group {} does not match:", seq, group_name);
    auto calls = entry.calls;
    std::sort(calls.begin(), calls.end());
    for (size_t i = 0; i < calls.size(); ++i)
      message += fmt::format("{} rank {} called {}", i ? ";" : "", calls[i].first, calls[i].second);
    fail_locked(message);
    throw CommError(message);
  }
  if (static_cast<int>(entry.calls.size()) == members) collectives_.erase(key);
}

std::vector<std::pair<int, int>> LocalWorld::exchange(const std::string& group_key, int64_t id,
                                                      const std::vector<int>& members, int my_index,
                                                      std::pair<int, int> value,
                                                      const std::string& what) {
  const auto values = gather(group_key, id, members, my_index, {value.first, value.second}, what);
  std::vector<std::pair<int, int>> pairs;
  for (const auto& v : values) pairs.emplace_back(static_cast<int>(v[0]), static_cast<int>(v[1]));
  return pairs;
}

std::vector<std::vector<int64_t>> LocalWorld::gather(const std::string& group_key, int64_t id,
                                                     const std::vector<int>& members, int my_index,
                                                     std::vector<int64_t> value,
                                                     const std::string& what) {
  auto lock = lock_world();
  throw_if_stopped_locked();
  auto key = std::make_pair(group_key, id);
  Rendezvous& rv = rendezvous_[key];
  rv.values.resize(members.size());
  rv.values[my_index] = std::move(value);
  ++rv.arrived;
  for (int m : members) wake(m);
  int n = static_cast<int>(members.size());
  wait_locked(
      lock, members[my_index], [&what] { return what; }, [&rv, n] { return rv.arrived == n; });
  auto values = rv.values;
  if (++rv.departed == n) rendezvous_.erase(key);
  return values;
}

}  // namespace mgpu::comm::local
