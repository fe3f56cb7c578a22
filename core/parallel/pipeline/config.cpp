// Checking a pipeline configuration before anything runs, and splitting layers across stages.
// Every error is one line: what is wrong, and a setting that would work.
#include <fmt/format.h>

#include <fmt/ranges.h>  // fmt::join (moved here in fmt 11)

#include <algorithm>
#include <stdexcept>

#include "core/parallel/pipeline/schedule.h"
#include "core/theory/schedule_kind.h"

namespace mgpu::pipeline {

namespace {
[[noreturn]] void fail(const std::string& line) {
  throw std::invalid_argument(line);
}
// ZB-V and DualPipeV: two chunks per stage in a V, and enough micro-batches for the warmup.
void validate_v_schedule(const std::string& name, int stages, int microbatches, int layers) {
  if (2 * stages > layers)
    fail(
        fmt::format("{} puts 2 chunks on each of the {} stages: it needs at least {} layers; the "
                    "model has {}: use --stages {} or fewer, or --layers {}",
                    name, stages, 2 * stages, layers, std::max(1, layers / 2), 2 * stages));
  const int least = min_microbatches(name, stages);
  if (microbatches < least)
    fail(
        fmt::format("{} with {} stages needs at least {} micro-batches (got {}): use "
                    "--microbatches {} or more, or --schedule zb-h1",
                    name, stages, least, microbatches, least));
}

// DualPipe: the two copies meet in the middle (an even number of stages, so no stage holds both
// copies of one part), each direction takes half of the micro-batches, and each half must fill
// DualPipeV's warmup on P/2 stages (M/2 >= P).
void validate_dualpipe(int stages, int microbatches) {
  if (stages % 2 != 0)
    fail(
        fmt::format("dualpipe needs an even number of stages (got {}): use --stages {}, or "
                    "--schedule dualpipev",
                    stages, stages == 1 ? "2" : fmt::format("{} or {}", stages - 1, stages + 1)));
  const int least = min_microbatches(theory::schedule_name(theory::ScheduleKind::dualpipe), stages);
  if (microbatches < least || microbatches % 2 != 0)
    fail(
        fmt::format("dualpipe with {} stages needs an even number of micro-batches, at least {} "
                    "(got {}): use --microbatches {}",
                    stages, least, microbatches, std::max(least, microbatches + 1)));
}

}  // namespace

void validate_pipeline_config(const std::string& schedule_name, int stages, int microbatches,
                              int virtual_stages, int layers) {
  const auto found = theory::find_schedule(schedule_name);
  if (!found) {
    const auto& names = schedule_names();
    fail(fmt::format("unknown pipeline schedule '{}': use one of {}", schedule_name,
                     fmt::join(names, ", ")));
  }
  const theory::ScheduleTraits& schedule = theory::traits(*found);
  using theory::ScheduleKind;
  if (stages < 1)
    fail(fmt::format("stages must be at least 1 (got {}): use --stages 1 or more", stages));
  if (microbatches < 1)
    fail(fmt::format("micro-batches must be at least 1 (got {}): use --microbatches 1 or more",
                     microbatches));
  if (microbatches > max_microbatches)
    // A schedule lists every action of every stage, and a step keeps every micro-batch's batch.
    fail(
        fmt::format("{} micro-batches is more than the {} a schedule can hold: use "
                    "--microbatches {} or fewer",
                    microbatches, max_microbatches, max_microbatches));
  if (virtual_stages < 1)
    fail(
        fmt::format("virtual stages must be at least 1 (got {}): use --virtual-stages 1, or 2 or "
                    "more with --schedule interleaved",
                    virtual_stages));
  if (stages > layers)
    fail(
        fmt::format("{} stages need at least {} layers; the model has {}: use --stages {} or "
                    "fewer, or --layers {}",
                    stages, stages, layers, layers, stages));
  if (schedule.kind == ScheduleKind::naive && microbatches != 1)
    fail(
        fmt::format("naive model parallel runs one batch, not {} micro-batches: use "
                    "--microbatches 1, or --schedule gpipe to split the batch",
                    microbatches));
  if (!schedule.takes_virtual_stages && virtual_stages != 1)
    fail(
        fmt::format("--virtual-stages {} only applies to the interleaved schedule (zbv and "
                    "dualpipev always use 2 chunks, dualpipe 2 copies): use "
                    "--virtual-stages 1, or --schedule interleaved",
                    virtual_stages));
  if (schedule.v_shape) {
    validate_v_schedule(schedule_name, stages, microbatches, layers);
    return;
  }
  if (schedule.bidirectional) validate_dualpipe(stages, microbatches);
  if (!schedule.takes_virtual_stages) return;
  if (microbatches < stages)
    // Rounds of fewer than P micro-batches leave stage 0 waiting for each micro-batch to come
    // around the ring before its next chunk, so the bubble would exceed (P-1)/(VM+P-1).
    fail(
        fmt::format("interleaved 1F1B needs at least as many micro-batches as the {} stages (got "
                    "{}): use --microbatches {} or more, or --schedule 1f1b",
                    stages, microbatches, stages));
  if (virtual_stages * stages > layers)
    fail(
        fmt::format("interleaved with {} stages x {} chunks needs at least {} layers; the model "
                    "has {}: use --virtual-stages {} or fewer, or --layers {}",
                    stages, virtual_stages, stages * virtual_stages, layers,
                    std::max(1, layers / stages), stages * virtual_stages));
}

LayerPartition partition_layers(int layers, int parts) {
  if (parts < 1 || layers < parts)
    throw std::invalid_argument(
        fmt::format("cannot split {} layers into {} parts: every part needs at least one layer",
                    layers, parts));
  LayerPartition partition;
  const int base = layers / parts, extra = layers % parts;  // the first `extra` parts get one more
  std::vector<int> sizes;
  for (int part = 0, begin = 0; part < parts; ++part) {
    const int size = base + (part < extra ? 1 : 0);
    partition.ranges.emplace_back(begin, begin + size);
    sizes.push_back(size);
    begin += size;
  }
  partition.uneven = extra != 0;
  partition.description = fmt::format("stages have {} layers{}", fmt::join(sizes, ","),
                                      partition.uneven ? " (uneven)" : "");
  return partition;
}

}  // namespace mgpu::pipeline
