// What combines with what, in one table. Each row names the rule it checks and throws its one
// line (what is wrong, what would work) when the spec breaks it; validate runs the rows in order,
// so the first rule broken is the error. A part's own size rules stay beside the part
// (check_tp_size, check_cp_size, check_hybrid, ...): the table is where a run meets them all.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "core/parallel/expert_parallel.h"
#include "core/parallel/sequence_parallel.h"
#include "core/run/run.h"

namespace mgpu::run {

namespace {

template <class T>
const T* as(const RunSpec& spec) {
  return std::get_if<T>(&spec.parallelism);
}

int ranks(const RunSpec& spec) {
  return spec.world.ranks;
}

void phantom_checkpoint(const RunSpec& spec) {
  train::check_checkpoint_device(spec.world.device, spec.train);
}

void checkpoint_every(const RunSpec& spec) {
  if (spec.train.checkpoint_every > 0 && spec.train.checkpoint.empty())
    throw std::invalid_argument(
        fmt::format("--checkpoint-every {} needs --checkpoint FILE to "
                    "write to",
                    spec.train.checkpoint_every));
}

void single_device_rank(const RunSpec& spec) {
  if (as<SingleDevice>(spec) && ranks(spec) != 1)
    throw std::invalid_argument(fmt::format(
        "a single-device run holds the whole model on one rank, not {}: use 1 rank, or a "
        "parallel lesson (ddp, zero, tensor_parallel, ...)",
        ranks(spec)));
}

void zero_stage(const RunSpec& spec) {
  if (const Zero* z = as<Zero>(spec); z && (z->options.stage < 0 || z->options.stage > 3))
    throw std::invalid_argument(fmt::format(
        "ZeRO stage {} does not exist: use 0 (DDP), 1 (optimizer state), 2 (+ gradients) or 3 "
        "(+ parameters, FSDP)",
        z->options.stage));
}

// Data parallelism (naive, DDP, ZeRO): every replica takes an equal share of the global batch,
// DDP's cut again into its accumulation micro-steps.
void replica_shares(const RunSpec& spec) {
  if (as<NaiveDataParallel>(spec) || as<Zero>(spec))
    check_replica_shares(spec.train.global_batch, ranks(spec));
  if (const DataParallel* d = as<DataParallel>(spec))
    check_replica_shares(spec.train.global_batch, ranks(spec), d->accum);
}

// The exercise functions a part runs (the --impl selection's): present before any rank starts.
void part_seams(const RunSpec& spec) {
  if (const Zero* z = as<Zero>(spec)) parallel::check_seams(z->seams);
  if (const TensorParallel* t = as<TensorParallel>(spec)) parallel::check_seams(t->seams);
}

void tensor_parallel_sizes(const RunSpec& spec) {
  const TensorParallel* t = as<TensorParallel>(spec);
  if (!t) return;
  parallel::check_tp_size(spec.model, ranks(spec));
  if (t->sequence_parallel) parallel::check_sp_size(spec.model, ranks(spec), spec.model.seq_len);
}

void context_parallel_sizes(const RunSpec& spec) {
  if (const ContextParallel* c = as<ContextParallel>(spec))
    parallel::check_cp_size(spec.model, spec.model.seq_len, ranks(spec), c->layout);
}

void expert_parallel_sizes(const RunSpec& spec) {
  const ExpertParallel* e = as<ExpertParallel>(spec);
  if (!e) return;
  if (spec.model.experts <= 0)
    throw std::invalid_argument(
        "expert_parallel trains a mixture-of-experts model: add --experts E (e.g. --experts 8)");
  const int dp = ranks(spec);
  parallel::check_ep_size(spec.model, dp, e->ep);
  const int batch = spec.train.global_batch;
  if (batch % dp != 0)
    throw std::invalid_argument(
        fmt::format("--batch {} must divide over the {} ranks: try "
                    "--batch {}",
                    batch, dp, (batch / dp + 1) * dp));
}

void hybrid_mesh(const RunSpec& spec) {
  const Hybrid* h = as<Hybrid>(spec);
  if (!h) return;
  if (h->pipeline) {  // pp over the whole world: the pipeline lesson has sized its stages
    if (parallel::splits_backward(h->options.schedule))
      refuse_experts(spec.model, "--schedule " + h->options.schedule,
                     "zero-bubble's split backward has no MoE half; use --schedule 1f1b");
    return;
  }
  parallel::check_hybrid(spec.model, h->options, ranks(spec), spec.train.global_batch);
}

struct Rule {
  const char* checks;
  void (*check)(const RunSpec&);
};

// In the order a refusal is reported.
constexpr Rule kRules[] = {
    {"the phantom device has no values to checkpoint", phantom_checkpoint},
    {"--checkpoint-every writes to --checkpoint", checkpoint_every},
    {"a single device is one rank", single_device_rank},
    {"ZeRO's stage is 0 to 3", zero_stage},
    {"the part's exercise functions are given", part_seams},
    {"every data-parallel replica takes an equal share of the batch", replica_shares},
    {"tp divides the heads and the MLP; with SP the sequence, and no experts",
     tensor_parallel_sizes},
    {"cp splits the sequence into its layout's chunks; no experts", context_parallel_sizes},
    {"ep needs experts, divides them and the ranks; the batch splits over dp",
     expert_parallel_sizes},
    {"the hybrid mesh multiplies to the world and divides what it splits; a split backward has "
     "no MoE half",
     hybrid_mesh},
};

}  // namespace

void check_replica_shares(int global_batch, int ranks, int accum) {
  const int parts = ranks * accum;
  if (parts <= 0 || global_batch % parts == 0) return;
  const int below = global_batch / parts * parts, above = below + parts;
  throw std::invalid_argument(fmt::format(
      "global batch {} is not divisible by {} ranks x {} accumulation steps: use {}", global_batch,
      ranks, accum, below > 0 ? fmt::format("{} or {}", below, above) : std::to_string(above)));
}

void validate(const RunSpec& spec) {
  if (!spec.task) throw std::invalid_argument("a run needs a task (RunSpec::task)");
  if (!spec.optimizer) throw std::invalid_argument("a run needs an optimizer (RunSpec::optimizer)");
  for (const Rule& rule : kRules) rule.check(spec);
}

}  // namespace mgpu::run
