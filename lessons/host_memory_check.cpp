#include "lessons/host_memory_check.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/memory/activations.h"
#include "core/ops/cuda_emulation.h"
#include "core/runtime/allocator.h"
#include "core/runtime/host_memory.h"
#include "core/theory/model_states.h"
#include "exercises/exercises.h"

namespace mgpu::lessons {

namespace {

// Sizes past this are refused before any formula runs, so no product overflows int64.
constexpr double kLargestCountable = 1e18;

int local_ranks(const CommonOptions& c) {
  return launched_by_mpi() ? 1 : c.ranks;  // under mpirun this process is one rank
}

// An order of magnitude of the run, in double, only to keep the exact sums below in range.
double rough_bytes(const GPTConfig& cfg, int64_t batch) {
  const double c = cfg.dim, t = cfg.seq_len, v = cfg.vocab, l = cfg.layers;
  // One block's parameters and kept values per token fit int64 for every valid config (they are
  // products of two widths); the products with the batch and the layers are what need double.
  const double block = double(theory::block_parameters(cfg).total());
  const double kept = double(memory::block_kept_elements_per_token(cfg));
  const double params = l * block + 2 * v * c + t * c;
  const double activations = double(batch) * t * ((l + 2) * (kept + cfg.heads * t + 16) + 2 * v);
  return 20 * params + 4 * activations;
}

// Every rank samples the global batch: tokens and targets, 4 B each.
int64_t sampled_batch_bytes(int64_t batch, int64_t seq, int local_ranks) {
  return int64_t{local_ranks} * batch * seq * 2 * int64_t(sizeof(int32_t));
}

// What this process may plan to use: the host's budget, or under mpirun its share of it, since
// every process of the job on this host holds its own rank (the check runs in each of them and
// sees only itself).
int64_t process_budget(int64_t available) {
  return host_memory_budget(available) / processes_on_this_host();
}

std::string fits_message(const HostFootprint& need, int64_t budget, int64_t available) {
  const int processes = processes_on_this_host();
  if (processes > 1)
    return fmt::format(
        "needs about {} in each of the {} processes of this job on this host, more than the {} "
        "each can have (3/4 of the {} available, shared by {}): {}",
        format_bytes(need.total()), processes, format_bytes(budget), format_bytes(available),
        processes, need.breakdown());
  return fmt::format(
      "needs about {} on this host, more than the {} it can give (3/4 of the {} "
      "available): {}",
      format_bytes(need.total()), format_bytes(budget), format_bytes(available), need.breakdown());
}

}  // namespace

int64_t HostFootprint::total() const {
  return parameters + gradients + optimizer_state + activations + workspace + comm_buffers + data;
}

std::string HostFootprint::breakdown() const {
  std::vector<std::string> parts;
  auto add = [&](const char* name, int64_t bytes) {
    if (bytes > 0) parts.push_back(fmt::format("{} {}", name, format_bytes(bytes)));
  };
  add("parameters", parameters);
  add("gradients", gradients);
  add("optimizer_state", optimizer_state);
  add("activations", activations);
  add("workspace", workspace);
  add("comm_buffers", comm_buffers);
  add("data", data);
  return fmt::format("{} = {}", fmt::join(parts, " + "), format_bytes(total()));
}

HostFootprint training_footprint(const GPTConfig& cfg, const std::string& optimizer, int64_t batch,
                                 int local_ranks, int state_copies) {
  // Training state from exercise 05's estimator (always the reference, whatever --impl says: a
  // stub must not let a run past the check): bf16/fp16 weights are born in 2 bytes, gradients
  // stay fp32 and the optimizer state carries the fp32 master weights (2 + 4 + 12 B, the mixed
  // row). SGD's momentum is half of AdamW's m + v.
  const int64_t params = reference::gpt_param_count(cfg);
  const memory::MemoryEstimate fp32 = reference::estimate_memory({params, memory::Precision::fp32});
  const memory::MemoryEstimate mixed =
      reference::estimate_memory({params, memory::Precision::mixed_bf16});
  HostFootprint f;
  f.parameters = cfg.dtype == DType::f32 ? fp32.parameters : mixed.parameters;
  f.gradients = mixed.gradients;  // fp32 in either precision
  f.optimizer_state = optimizer == "sgd"        ? fp32.optimizer_state / 2
                      : cfg.dtype == DType::f32 ? fp32.optimizer_state
                                                : mixed.optimizer_state;
  const memory::StepActivationBytes step = memory::step_activation_bytes(cfg, batch);
  f.activations = step.activations;
  f.workspace = step.workspace;
  f.data = sampled_batch_bytes(batch, cfg.seq_len, local_ranks);
  f.parameters *= state_copies;
  f.gradients *= state_copies;
  f.optimizer_state *= state_copies;
  return f;
}

void check_training_fits_host(const CommonOptions& c, const GPTConfig& cfg, int64_t available,
                              int state_copies) {
  // A GPU's memory is not this host's, unless the GPU is emulated on the CPU.
  if ((c.device == "cuda" && !cuda::emulation_requested()) || available < 0) return;
  const bool phantom = c.device == "phantom";
  const int64_t budget = process_budget(available);
  const int ranks = local_ranks(c);
  const std::string or_phantom =
      phantom ? "" : ", or add --device phantom to run it as shapes and times only";
  if (!phantom && rough_bytes(cfg, c.batch) * state_copies > kLargestCountable)
    throw UsageError(
        fmt::format("this run needs more than {:.0e} bytes on this host, which can give {}: shrink "
                    "--batch/--layers/--dim/--seq/--vocab{}",
                    kLargestCountable, format_bytes(budget), or_phantom));
  // The phantom device allocates shapes only; its sampled batches are real host memory.
  auto footprint = [&](const GPTConfig& g, int64_t batch) {
    return phantom ? HostFootprint{.data = sampled_batch_bytes(batch, g.seq_len, ranks)}
                   : training_footprint(g, c.optimizer, batch, ranks, state_copies);
  };
  const HostFootprint need = footprint(cfg, c.batch);
  if (need.total() <= budget) return;
  const std::string replicas =
      state_copies > 1 && !phantom
          ? fmt::format(" with a replica (weights, gradients, optimizer) on each of {} ranks",
                        state_copies)
          : "";

  // Every category is affine in the batch, and (at a fixed batch) in the layers.
  auto total_at = [&](const GPTConfig& g, int64_t batch) { return footprint(g, batch).total(); };
  const int64_t one_sequence = total_at(cfg, 1);
  if (one_sequence <= budget) {
    const int64_t fixed = total_at(cfg, 0), per_sequence = one_sequence - fixed;
    const int64_t largest = (budget - fixed) / per_sequence;
    throw UsageError(fmt::format("--batch {}{} {}; the largest --batch that fits is {}{}", c.batch,
                                 replicas, fits_message(need, budget, available), largest,
                                 or_phantom));
  }
  // The model does not fit with a single sequence: name the most layers that do, at the batch
  // asked for if any, else at batch 1.
  auto largest_layers = [&](int64_t batch) {
    GPTConfig one_layer = cfg, two_layers = cfg;
    one_layer.layers = 1;
    two_layers.layers = 2;
    const int64_t per_layer = total_at(two_layers, batch) - total_at(one_layer, batch);
    const int64_t without_layers = total_at(one_layer, batch) - per_layer;
    return (budget - without_layers) / per_layer;
  };
  const int64_t at_batch = largest_layers(c.batch), at_one = largest_layers(1);
  throw UsageError(fmt::format(
      "this model{} {}; {}{}", replicas, fits_message(need, budget, available),
      at_batch >= 1 ? fmt::format("at most --layers {} fit at --batch {}", at_batch, c.batch)
      : at_one >= 1 ? fmt::format("at most --layers {} fit at --batch 1", at_one)
                    : std::string("even one layer at --batch 1 does not fit: shrink --dim/--vocab"),
      or_phantom));
}

void check_training_fits_host(const CommonOptions& c, const GPTConfig& cfg) {
  check_training_fits_host(c, cfg, host_available_bytes());
}

void check_replicas_fit_host(const CommonOptions& c, const GPTConfig& cfg) {
  check_training_fits_host(c, cfg, host_available_bytes(), local_ranks(c));
}

void check_collectives_fit_host(const CommonOptions& c, int64_t max_bytes, int64_t available) {
  if (c.device != "cpu" || available < 0) return;  // phantom buffers are shapes only
  const int64_t budget = process_budget(available);
  const int ranks = local_ranks(c), n = std::max(1, c.ranks);
  // Per rank: the buffer, the 1/n other end of a gather or scatter, one staged chunk of 1/n.
  // (Saturates instead of overflowing: --max-bytes may be up to 2^62.)
  auto per_process = [&](int64_t bytes) {
    return bytes > std::numeric_limits<int64_t>::max() / (ranks + 2)
               ? std::numeric_limits<int64_t>::max()
               : ranks * (bytes + 2 * (bytes / n));
  };
  HostFootprint need;
  need.comm_buffers = per_process(max_bytes);
  if (need.comm_buffers <= budget) return;
  int64_t largest = 4;  // the sweep grows x4 per row; name the largest row that fits
  while (largest <= max_bytes / 4 && per_process(largest * 4) <= budget) largest *= 4;
  throw UsageError(fmt::format("--max-bytes {} over {} rank(s) {}; use --max-bytes {} or less",
                               format_bytes(max_bytes), ranks,
                               fits_message(need, budget, available), format_bytes(largest)));
}

void check_collectives_fit_host(const CommonOptions& c, int64_t max_bytes) {
  check_collectives_fit_host(c, max_bytes, host_available_bytes());
}

}  // namespace mgpu::lessons
