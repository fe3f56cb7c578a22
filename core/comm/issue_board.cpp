#include "core/comm/issue_board.h"

#include <chrono>

#include <fmt/format.h>

#include "core/comm/comm.h"

namespace mgpu::comm {

std::shared_ptr<IssueBoard> IssueBoard::of_group(const std::string& key) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<IssueBoard>> boards;
  std::lock_guard lock(mutex);
  std::shared_ptr<IssueBoard> board = boards[key].lock();
  if (!board) {
    board = std::make_shared<IssueBoard>();
    boards[key] = board;
  }
  return board;
}

std::vector<double> IssueBoard::collective_starts(int64_t seq, int rank, int size, double issued,
                                                  double timeout, const std::string& what) {
  std::unique_lock lock(mutex_);
  Round& round = rounds_[seq];
  if (round.issued.empty()) {
    round.issued.assign(static_cast<size_t>(size), 0.0);
    round.posted.assign(static_cast<size_t>(size), false);
  }
  round.issued[rank] = issued;
  round.posted[rank] = true;
  ++round.count;
  changed_.notify_all();
  const bool all_there = changed_.wait_for(lock, std::chrono::duration<double>(timeout),
                                           [&] { return round.count == size; });
  if (!all_there) {
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!round.posted[r]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
    throw CommError(
        fmt::format("timeout: rank {} waited more than {} s for group rank(s) {} to "
                    "issue {}",
                    rank, timeout, missing, what));
  }
  std::vector<double> starts = round.issued;
  if (++round.taken == size) rounds_.erase(seq);
  return starts;
}

void IssueBoard::post_send(int src, int dst, int64_t index, double sent) {
  std::lock_guard lock(mutex_);
  sends_[{src, dst, index}] = sent;
  changed_.notify_all();
}

double IssueBoard::take_send(int src, int dst, int64_t index, double timeout,
                             const std::string& what) {
  std::unique_lock lock(mutex_);
  auto posted = [&] { return sends_.count({src, dst, index}) > 0; };
  if (!changed_.wait_for(lock, std::chrono::duration<double>(timeout), posted))
    throw CommError(fmt::format("timeout: rank {} waited more than {} s for rank {} to send {}",
                                dst, timeout, src, what));
  auto it = sends_.find({src, dst, index});
  const double sent = it->second;
  sends_.erase(it);
  return sent;
}

}  // namespace mgpu::comm
