// The data-parallel lessons' own options (--overlap, --bucket-mb, --accum, --batch-per-rank) and
// what they resolve to: the global batch and the DDP bucket cap, checked with one-line errors.
#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "core/run/run.h"
#include "core/runtime/input_file.h"
#include "lessons/ddp.h"
#include "lessons/validate.h"

namespace mgpu::lessons {

namespace {

// A bucket cap from one byte to 1 TB: outside that (or inf) the bucket plan means nothing.
constexpr double kMinBucketMB = 1e-6, kMaxBucketMB = 1e6;

}  // namespace

int resolve_global_batch(const CommonOptions& c, const DataParallelOptions& d) {
  if (d.accum <= 0) throw UsageError(fmt::format("--accum must be at least 1, got {}", d.accum));
  if (d.batch_per_rank > 0) return d.batch_per_rank * c.ranks * d.accum;
  run::check_replica_shares(c.batch, c.ranks, d.accum);
  return c.batch;
}

int64_t resolve_bucket_bytes(const DataParallelOptions& d, int64_t gradient_bytes) {
  if (d.bucket_mb == "auto") return std::max<int64_t>(1, (gradient_bytes + 3) / 4);
  double mb = 0;
  try {
    size_t used = 0;
    mb = std::stod(d.bucket_mb, &used);
    if (used != d.bucket_mb.size()) mb = 0;
  } catch (const std::exception&) {
  }
  if (!(mb >= kMinBucketMB && mb <= kMaxBucketMB))  // false for nan and inf too
    throw UsageError(
        fmt::format("--bucket-mb must be 'auto' or from {:g} to {:g} MB, got '{}': try 0.05",
                    kMinBucketMB, kMaxBucketMB, echo_input(d.bucket_mb, 40)));
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(mb * 1e6)));
}

void add_data_parallel_options(CLI::App& app, DataParallelOptions& d, bool ddp_options,
                               bool accum_option) {
  if (ddp_options) {
    app.add_option("--overlap", d.overlap,
                   "on: bucketed all-reduce during backward; off: one all-reduce per tensor after")
        ->check(Switch)  // CLI11 reads on/off (and true/false, 1/0) as a bool, -1 as off
        ->default_str("on");
    app.add_option("--bucket-mb", d.bucket_mb,
                   "gradient bucket cap in MB (1e6 B), or auto = a quarter of the gradients")
        ->check(CLI::Validator(
            [](std::string& s) {
              return s == "auto" ? std::string()
                                 : InRange(kMinBucketMB, kMaxBucketMB, "MB or auto")(s);
            },
            "auto|MB"))
        ->capture_default_str();
  }
  if (accum_option)
    app.add_option("--accum", d.accum, "micro-steps per optimizer step (gradient accumulation)")
        ->capture_default_str();
  app.add_option("--batch-per-rank", d.batch_per_rank,
                 "sequences per rank per micro-step; sets --batch to this x ranks x accum")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace mgpu::lessons
