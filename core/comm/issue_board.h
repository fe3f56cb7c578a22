// Where the ranks of a backend that runs no algorithm of its own (NCCL: one thread per GPU, one
// process) tell each other when they issued an operation, so the modeled clock can time a
// collective from every member's start and a receive from its sender's send, exactly as the
// local backend's messages would (cost_model.h's member_end_times). Off the modeled clock nothing
// asks it. A group's members find the same board by the group's key.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace mgpu::comm {

class IssueBoard {
 public:
  // The board of the group `key` (every member asking with the same key gets the same board while
  // one of them holds it).
  static std::shared_ptr<IssueBoard> of_group(const std::string& key);

  // Collective #seq of a group of `size`: posts when group rank `rank` issued it and waits for
  // every member's time (group-rank order). Past `timeout` seconds: a CommError naming `what`
  // and the members not there yet.
  std::vector<double> collective_starts(int64_t seq, int rank, int size, double issued,
                                        double timeout, const std::string& what);
  // Message #index from group rank src to dst (numbered in call order on both sides: NCCL matches
  // a pair's messages in that order) left at `sent`; the receiver takes it, waiting up to
  // `timeout` seconds for the sender to get there.
  void post_send(int src, int dst, int64_t index, double sent);
  double take_send(int src, int dst, int64_t index, double timeout, const std::string& what);

 private:
  struct Round {
    std::vector<double> issued;
    std::vector<bool> posted;
    int count = 0, taken = 0;
  };
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Round> rounds_;
  std::map<std::tuple<int, int, int64_t>, double> sends_;
};

}  // namespace mgpu::comm
