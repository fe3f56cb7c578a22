// Injected faults (issue #53): what real training is shaped by, put into the model on purpose.
// A slow rank computes F times slower (from a step on), a slow link carries 1/F of its
// bandwidth, jitter adds seeded compute-time noise, and a failed rank dies at a step. The plan
// rides in the HardwareProfile every rank holds, so the modeled clock prices kernels and
// messages with it on threads, under mpirun and in the cost model alike; an empty plan changes
// nothing. The texts are parsed strictly: one line saying what is wrong and what would work.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mgpu {

struct SlowRank {
  int rank = 0;
  double factor = 1;  // compute time multiplied by this
  int from_step = 0;  // slow from this step on (0: from the start)
};

struct SlowLink {
  int a = 0, b = 0;   // either direction between the two ranks
  double factor = 1;  // bandwidth divided by this
};

struct FailRank {
  int rank = 0;
  int step = 0;  // the rank dies as this step begins
};

struct FaultPlan {
  std::vector<SlowRank> slow_ranks;
  std::vector<SlowLink> slow_links;
  double jitter = 0;  // compute-time noise: each kernel's time x (1 + U(-jitter, +jitter))
  uint64_t seed = 0;  // the jitter's seed
  std::optional<FailRank> fail;

  bool empty() const;
  // What a kernel's modeled time is multiplied by on `rank` during `step` (-1: before the first),
  // for the rank's `kernel`-th kernel (the jitter's draw: a function of seed, rank, kernel).
  double compute_factor(int rank, int step, uint64_t kernel) const;
  // What the bandwidth term of a message between a and b is multiplied by.
  double link_factor(int a, int b) const;
  // Throws std::invalid_argument (one line) when a rank is not below `ranks` or a step not below
  // `steps` (the run's last step + 1).
  void check(int ranks, int steps) const;
  // One phrase per fault: "rank 2 computes 2x slower from step 3", ...
  std::vector<std::string> describe() const;
  nlohmann::json to_json() const;
};

// The option texts, strictly: "R:F" or "R:F@S"; "A-B:F"; "P" (percent, 0 <= P < 100); "R@S".
// Each throws std::invalid_argument with one line naming the option and a form that works.
SlowRank parse_slow_rank(const std::string& text);
SlowLink parse_slow_link(const std::string& text);
double parse_jitter(const std::string& text);
FailRank parse_fail_rank(const std::string& text);

// Raised on the failed rank as its step begins (--fail-rank): the rank is lost.
class RankLost : public std::runtime_error {
 public:
  RankLost(int rank, int step);
  int rank() const { return rank_; }
  int step() const { return step_; }

 private:
  int rank_, step_;
};

}  // namespace mgpu
