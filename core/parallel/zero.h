// ZeRO (Rajbhandari et al., 2020) and FSDP: data parallelism without the replicas' redundancy.
// Every rank trains on its own shard of the global batch, as in DDP, but the model states are cut
// into N shards and each rank keeps only its own: stage 1 the optimizer state, stage 2 also the
// gradients, stage 3 (FSDP) also the parameters. Stage 0 is plain DDP, for comparison.
// Communication per step and rank: stages 0-2 move 2 x model bytes (an all-reduce is a
// reduce-scatter plus an all-gather); stage 3 moves 3 x (parameters all-gathered before forward
// and again before backward, gradients reduce-scattered): 1.5x, the price of 1/N parameters.
//
// How shards are cut: each unit (the embedding, every block, the head) is one flat vector of its
// parameters in forward order; rank r owns elements chunk_range(n, N, r) of it (consecutive
// chunks, the first n % N ranks one element more), so any parameter count works. Stage 1 runs its
// optimizer step through exercise 08's seam.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/comm/comm.h"
#include "core/model/gpt.h"
#include "core/parallel/layerwise.h"
#include "core/parallel/mesh_layout.h"
#include "core/train/trainer.h"

namespace mgpu::parallel {

// ------------------------------------------------------------------ exercise 08 seams
// Exercise 08 (docs/exercises/08-zero-sharded-step.md): stage 1's sharded optimizer step. Which
// chunk of a unit a rank owns, and the step itself, are the pieces a student re-implements: core
// declares them here, solutions/zero_shard_step.cpp holds the reference,
// exercises/zero_shard_step.cpp the student's, and the program installs one (`--impl`).

// One unit as the sharded step sees it: its whole flat parameters (the model's dtype) and this
// rank's whole flat gradient (fp32, the mean over this rank's share of the batch).
struct FlatUnit {
  Tensor params;
  Tensor grads;
};

// [begin, end) of the elements of a flat unit of `numel` that rank `rank` of `ranks` owns. Must cut
// as the collectives do (comm::chunk_range): consecutive chunks, the first numel % ranks one more.
using OwnedChunkFn = std::function<std::pair<int64_t, int64_t>(int64_t numel, int ranks, int rank)>;
// After backward, on every rank of `dp`: (1) reduce-scatter each unit's gradient so that my owned
// chunk of units[i].grads holds the MEAN over the ranks; (2) call update_owned() exactly once (the
// optimizer updates my chunks of the parameters from those gradients); (3) all-gather, so that
// every rank's units[i].params hold every rank's updated chunk.
using ShardedStepFn = std::function<void(comm::Comm& dp, const std::vector<FlatUnit>& units,
                                         const std::function<void()>& update_owned)>;

struct ZeroSeams {
  std::string impl_name;  // "reference" or "mine"
  OwnedChunkFn owned_chunk;
  ShardedStepFn sharded_step;
};

// Throws std::logic_error naming the first missing function (a layout checks its table once,
// when it is built).
void check_seams(const ZeroSeams& seams);

// ------------------------------------------------------------------ the layout

struct ZeroOptions {
  int stage = 1;         // 0 (DDP), 1 (optimizer state), 2 (+ gradients), 3 (+ parameters: FSDP)
  bool prefetch = true;  // stage 3: issue the next unit's all-gather before this unit computes
};

// What one rank holds of one unit (a layer: the embedding, a block or the head).
struct ZeroUnit {
  ParamList params;              // the model's parameters of this layer, in forward order
  std::vector<int64_t> offsets;  // each parameter's first element in the flat unit
  std::vector<Shape> shapes;     // each parameter's shape (stage 3 drops the tensors)
  int64_t numel = 0;             // elements of the flat unit
  int64_t begin = 0, end = 0;    // the chunk this rank owns: chunk_range(numel, N, rank)
  Tensor flat_params;            // stages 0-2: the whole unit; the parameters are views into it
  Tensor flat_grads;             // stages 0-1: the whole unit's gradient (the grads are views)
  Tensor param_shard;            // stage 3: my chunk of the parameters, the only copy kept
  Tensor grad_shard;             // stages 2-3: my chunk of the averaged gradient
  Tensor gathered;               // stage 3, transient: the whole unit while it computes
  Tensor bucket;                 // stages 2-3, transient: the unit's gradient during backward
  comm::Work gathering, reducing;
};

// ------------------------------------------------------------------ pieces the stages share
// (the zero lesson's layout and the mesh's ZeRO over dp, core/parallel/zero_over_dp.h, build every
// stage from these; stage 1 adds the exercise-08 step.)

// A unit's flat layout: its parameters' offsets and shapes in one flat vector, and the chunk rank
// `rank` of `ranks` owns (exercise 08's owned_chunk, checked against the collectives' cut).
ZeroUnit plan_unit(ParamList params, int ranks, int rank, const OwnedChunkFn& owned_chunk);
// Points each parameter's data (grads = false) or grad (true) at its place in `flat`.
void view_params(ZeroUnit& u, Tensor flat, bool grads);

// The slice of one parameter a rank owns, as a parameter of its own (1-D, the same name) that the
// optimizer updates: its data and grad are views of this rank's chunk.
struct OwnedSlice {
  Param* full = nullptr;
  Shape shape;                 // the parameter's (as this rank holds it)
  int64_t begin = 0, end = 0;  // in the parameter's flat elements
  std::unique_ptr<Param> shard;
};
// Appends the slices of u's parameters that fall in its owned chunk. `data` and `grad` are each
// either the whole flat unit or only the owned chunk (u.end - u.begin elements). A slice's spec is
// its parameter's cut to the slice (a flat chunk), so it maps itself into the full model.
void append_owned_slices(const ZeroUnit& u, const Tensor& data, const Tensor& grad,
                         std::vector<OwnedSlice>& out);

// The owned slices' parameters (what the optimizer updates), for the checkpoint map.
ParamList owned_params(const std::vector<OwnedSlice>& owned);

// Stages 0-2: the whole unit, flat, with its initial values; the parameters view into it.
void materialise_unit(ZeroUnit& u, uint64_t seed, DType dtype);
// Stage 3: only my chunk of the unit, with the initial values of the elements it holds.
void materialise_chunk(ZeroUnit& u, uint64_t seed, DType dtype);
// Stage 3: all-gather the unit into a transient whole (async), unless already in flight; attach:
// wait for it and point the parameters at it; release: drop it.
void gather_unit(ZeroUnit& u, comm::Comm& dp, DType dtype);
void attach_unit(ZeroUnit& u);
void release_unit(ZeroUnit& u);
// Stages 2-3: a transient whole-unit gradient the parameters' grads view while backward fills it.
void open_bucket(ZeroUnit& u);
// Stages 2-3: reduce-scatter the bucket into my chunk (the mean over dp, async); the parameters'
// grads stop viewing it (the bucket itself lives until the reduction is waited for).
void reduce_scatter_bucket(ZeroUnit& u, comm::Comm& dp);
// Waits for every unit's reduction and drops its bucket: the gradient chunks are final.
void finish_reductions(std::vector<ZeroUnit>& units);
// Stages 1-2 (outside exercise 08's step): every rank's updated chunk, to every rank.
void gather_updated_params(std::vector<ZeroUnit>& units, comm::Comm& dp, DType dtype);

// ZeRO over the data-parallel ranks as a part of the mesh engine (mesh_layout.h): each layer one
// flat unit, cut over dp; every rank materialises only what its stage keeps of it.
class ZeroPart : public MeshPart {
 public:
  // `seams`: exercise 08's owned chunk and sharded step.
  ZeroPart(const GPTConfig& config, comm::Comm& dp, ZeroOptions options, const ZeroSeams& seams);
  std::string name() const override;                                  // "zero-1", ...
  void materialise(GPT& model, uint64_t seed, DType dtype) override;  // cuts the units
  void attach(GPT&, TracePhase&) override {}
  ParamList optimised(GPT& model) override;
  void report(train::RankReport& report) const override;  // its chunks and largest unit
  data::Batch share(const data::Batch& global_batch) override;
  void zero_grad(GPT& model, optim::Optimizer& optimizer) override;
  std::optional<float> forward_backward(GPT& model, const data::Batch& mine, TracePhase& phase,
                                        float loss_scale) override;
  void synchronise(GPT& model) override;
  bool step_optimizer(const std::function<bool()>& update) override;
  void end_step() override { activations_.reset(); }
  std::vector<comm::Comm*> model_groups() override { return {&dp_}; }
  bool loss_is_shard() const override { return true; }  // equal shards: their mean is the batch's
  bool writes(const Param&) const override { return true; }
  std::vector<train::TensorShard> shards(GPT& model, optim::Optimizer* optimizer) override;

  const std::vector<ZeroUnit>& units() const { return units_; }
  int64_t owned_elements() const;  // parameter elements this rank's optimizer updates

 private:
  LayerHooks layer_hooks(int last);
  void gather(int unit) { gather_unit(units_[unit], dp_, config_.dtype); }
  void attach(int unit) { attach_unit(units_[unit]); }
  void release(int unit) { release_unit(units_[unit]); }
  void open_bucket(int unit) { parallel::open_bucket(units_[unit]); }
  void reduce(int unit);  // after the unit's backward: average its gradient
  int last_unit() const { return static_cast<int>(units_.size()) - 1; }

  GPTConfig config_;
  comm::Comm& dp_;
  ZeroOptions options_;
  ZeroSeams seams_;
  std::vector<ZeroUnit> units_;
  std::vector<OwnedSlice> owned_;
  std::optional<GPTActivations> activations_;  // the step's, freed after the optimizer
};

// One rank of a ZeRO run: the mesh engine with the ZeRO part over `dp` (same seed on every rank).
std::unique_ptr<MeshLayout> zero_layout(const GPTConfig& config, comm::Comm& dp,
                                        ZeroOptions options,
                                        const train::OptimizerFactory& make_optimizer,
                                        const ZeroSeams& seams);

}  // namespace mgpu::parallel
