// Sequence parallelism (Megatron-SP on top of TP): on 1, 2 and 4 ranks, and under every recompute
// mode, it trains to the single-device parameters (and AdamW state) through its shard map; one
// step has all-gathers and reduce-scatters of B*T*C and no activation all-reduce (only the
// layernorm gradients' one all-reduce), and its g/g-bar bytes on the wire equal TP's all-reduces;
// its peak activations per rank are below TP's; the sequence helpers cut and join tokens; a
// sequence that does not divide is one clear line. Rank threads compute, the main thread asserts.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <map>
#include <mutex>

#include "common/selected_seams.h"
#include "common/single_device_reference.h"
#include "core/data/task.h"
#include "core/model/init.h"
#include "core/parallel/mesh.h"
#include "core/parallel/sequence_parallel.h"
#include "core/world/world.h"
#include "exercises/selection.h"
#include "lessons/sequence_parallel.h"

namespace test_sequence_parallel {

using namespace mgpu;
using namespace mgpu::parallel;

namespace {
constexpr int kSteps = 4, kBatch = 4, kSeq = 8;

GPTConfig small_model(const data::Task& task, Recompute recompute = Recompute::none) {
  GPTConfig cfg;
  cfg.vocab = task.vocab_size();
  cfg.seq_len = kSeq;
  cfg.layers = 2;
  cfg.dim = 48;
  cfg.heads = 12;  // 12 heads, 192 hidden units and 8 tokens divide over 1, 2, 4 ranks
  cfg.recompute = recompute;
  return cfg;
}

std::unique_ptr<optim::Optimizer> adamw(const ParamList& params) {
  optim::AdamWOptions o;
  o.lr = 3e-3f;
  o.weight_decay = 0.0f;
  return std::make_unique<optim::AdamW>(params, o);
}

using testing::FullTensors;

FullTensors train_single_device(const GPTConfig& cfg, const data::Task& task,
                                std::vector<float>& losses) {
  return testing::train_single_device_reference(cfg, task, adamw, kSteps, kBatch, kSeq, &losses);
}

// Every writer's shard placed into full tensors; `covered` counts the writes of each element.
FullTensors train_sequence_parallel(const GPTConfig& cfg, const data::Task& task, int tp,
                                    std::map<std::string, std::vector<int>>& covered,
                                    std::vector<float>& losses) {
  FullTensors full;
  std::mutex mutex;
  World world(WorldOptions{.ranks = tp, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    auto layout = sequence_parallel(cfg, *ctx.comm, adamw, ex::selected_seams().tp);
    std::vector<float> mine;
    for (int step = 0; step < kSteps; ++step)
      mine.push_back(*layout->step(task.sample(step, kBatch, kSeq), step).loss);
    std::lock_guard lock(mutex);
    if (ctx.rank == 0) losses = mine;
    for (const train::TensorShard& s : layout->shards()) {
      if (!s.writer) continue;
      int64_t numel = 1;
      for (int64_t d : s.full_shape) numel *= d;
      auto& dst = full[s.full_name];
      auto& count = covered[s.full_name];
      dst.resize(static_cast<size_t>(numel));
      count.resize(static_cast<size_t>(numel));
      const std::vector<float> local = s.local.to_vector();
      int64_t pos = 0;
      for (const train::ShardRun& run : s.runs)
        for (int64_t i = 0; i < run.length && pos < static_cast<int64_t>(local.size()); ++i) {
          dst[static_cast<size_t>(run.full_offset + i)] = local[static_cast<size_t>(pos++)];
          count[static_cast<size_t>(run.full_offset + i)]++;
        }
    }
  });
  return full;
}

// The key bias (attn.qkv.bias rows [C, 2C)) is the one parameter the loss does not depend on: it
// adds q.b_k to every score of a query, and softmax ignores a shift. Its true gradient is exactly
// zero, so what either run computes for it is rounding noise, which AdamW divides by its own size
// into steps of up to lr: its values are set apart here, and the losses show the same function.
bool is_key_bias(const std::string& name, size_t i, int dim) {
  return name.size() >= 13 && name.compare(name.size() - 13, 13, "attn.qkv.bias") == 0 &&
         name.rfind("adamw.", 0) != 0 && i >= size_t(dim) && i < size_t(2 * dim);
}

void require_same_model(const FullTensors& got, const FullTensors& reference,
                        const std::map<std::string, std::vector<int>>& covered, int dim) {
  REQUIRE(got.size() == reference.size());  // every parameter and every AdamW moment
  for (const auto& [name, want] : reference) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    const std::vector<float>& have = got.at(name);
    REQUIRE(have.size() == want.size());
    for (int c : covered.at(name)) REQUIRE(c == 1);  // every element written by exactly one rank
    // Rounding only (sums in another order, ~1e-7 relative, amplified by AdamW's 1/sqrt(v) in
    // tiny gradients): the same 2e-5 after 4 steps as TP's and DDP's equivalence tests.
    float worst = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (!is_key_bias(name, i, dim)) worst = std::max(worst, std::abs(have[i] - want[i]));
    CHECK(worst < 2e-5f);
  }
}

struct CommCounts {
  int all_gathers = 0, reduce_scatters = 0, all_reduces = 0, others = 0;
  int64_t gather_sent = 0, scatter_sent = 0, reduce_sent = 0;
  std::vector<int64_t> collective_bytes;  // bytes of every all-gather / reduce-scatter
  std::vector<int64_t> all_reduce_bytes;
};

CommCounts count_comm(const trace::Trace& trace, int rank) {
  CommCounts n;
  for (const trace::Event& e : trace.events) {
    if (e.rank != rank || e.lane != trace::Lane::comm || e.group != "tp0") continue;
    if (e.op == "all_gather") {
      ++n.all_gathers;
      n.gather_sent += e.sent_bytes;
      n.collective_bytes.push_back(e.bytes);
    } else if (e.op == "reduce_scatter") {
      ++n.reduce_scatters;
      n.scatter_sent += e.sent_bytes;
      n.collective_bytes.push_back(e.bytes);
    } else if (e.op == "all_reduce") {
      ++n.all_reduces;
      n.reduce_sent += e.sent_bytes;
      n.all_reduce_bytes.push_back(e.bytes);
    } else {
      ++n.others;
    }
  }
  return n;
}

// One step of TP (sequence_parallel = false) or TP+SP; the trace, and each rank's peak
// activation bytes from the allocator (after set-up).
// Tensor parallelism's layout with sequence_parallel's signature, for one_step.
std::unique_ptr<MeshLayout> tp_layout(const GPTConfig& cfg, comm::Comm& tp,
                                      const train::OptimizerFactory& make_optimizer,
                                      const TpSeams& seams, std::shared_ptr<Mesh> mesh) {
  return tensor_parallel(cfg, tp, make_optimizer, seams, false, std::move(mesh));
}

template <auto make_layout>
trace::Trace one_step(const GPTConfig& cfg, const data::Task& task, int tp,
                      std::vector<int64_t>& peak_activations) {
  peak_activations.assign(static_cast<size_t>(tp), 0);
  World world(WorldOptions{.ranks = tp, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    Mesh mesh(*ctx.comm, {.tp = tp});
    auto layout = make_layout(cfg, mesh.group(Axis::tp), adamw, ex::selected_seams().tp, nullptr);
    ctx.allocator.reset_peaks();
    StepScope scope(0);
    layout->step(task.sample(0, kBatch, kSeq), 0);
    peak_activations[static_cast<size_t>(ctx.rank)] =
        ctx.allocator.stats().peak[static_cast<int>(MemCategory::activations)];
  });
  return world.collect_trace();
}
}  // namespace

TEST_CASE("sequence parallelism trains to the single-device parameters", "[sp][equivalence]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  std::vector<float> want_losses;
  const FullTensors reference = train_single_device(cfg, *task, want_losses);
  for (int tp : {1, 2, 4}) {
    INFO("tp = " << tp);
    std::map<std::string, std::vector<int>> covered;
    std::vector<float> losses;
    const FullTensors got = train_sequence_parallel(cfg, *task, tp, covered, losses);
    REQUIRE(losses.size() == want_losses.size());
    for (size_t i = 0; i < losses.size(); ++i)
      CHECK(losses[i] == Approx(want_losses[i]).epsilon(1e-6));
    require_same_model(got, reference, covered, cfg.dim);
  }
}

TEST_CASE("sequence parallelism under selective and full recompute is the same model",
          "[sp][equivalence][recompute]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  std::vector<float> want_losses;
  const FullTensors reference = train_single_device(small_model(*task), *task, want_losses);
  for (Recompute mode : {Recompute::selective, Recompute::full}) {
    INFO("recompute " << recompute_name(mode));
    std::map<std::string, std::vector<int>> covered;
    std::vector<float> losses;
    const FullTensors got =
        train_sequence_parallel(small_model(*task, mode), *task, 2, covered, losses);
    require_same_model(got, reference, covered, small_model(*task).dim);
    for (size_t i = 0; i < losses.size(); ++i)
      CHECK(losses[i] == Approx(want_losses[i]).epsilon(1e-6));
  }
}

TEST_CASE("one SP step: all-gathers and reduce-scatters, no activation all-reduce, TP's bytes",
          "[sp][trace]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  const int64_t layers = cfg.layers, btc_bytes = int64_t{kBatch} * kSeq * cfg.dim * 4;
  for (int tp : {2, 4}) {
    INFO("tp = " << tp);
    std::vector<int64_t> tp_peaks, sp_peaks;
    const trace::Trace tp_trace = one_step<tp_layout>(cfg, *task, tp, tp_peaks);
    const trace::Trace sp_trace = one_step<sequence_parallel>(cfg, *task, tp, sp_peaks);
    for (int rank = 0; rank < tp; ++rank) {
      INFO("rank " << rank);
      const CommCounts tp_comm = count_comm(tp_trace, rank), sp = count_comm(sp_trace, rank);
      // g-bar forward + g backward: one reduce-scatter per row linear and per column linear.
      CHECK(sp.reduce_scatters == 4 * layers);
      // g forward + g-bar backward (4 per layer), the column inputs gathered again for their
      // weight gradients (2 per layer), the head's input and the embedding's gradient (2).
      CHECK(sp.all_gathers == 6 * layers + 2);
      for (int64_t b : sp.collective_bytes) CHECK(b == btc_bytes);
      // The only all-reduce: the layernorms' weight and bias gradients, 4*C per layer, once.
      CHECK(sp.all_reduces == 1);
      for (int64_t b : sp.all_reduce_bytes) CHECK(b == 4 * cfg.dim * layers * 4);
      CHECK(sp.others == 0);
      // On the wire: the reduce-scatters and the g/g-bar all-gathers move what TP's all-reduces
      // move (a ring all-reduce is a reduce-scatter then an all-gather); every all-gather sends
      // the same, so the extra 2L+2 are taken out by count.
      REQUIRE(sp.all_gathers > 0);
      const int64_t per_gather = sp.gather_sent / sp.all_gathers;
      CHECK(per_gather * sp.all_gathers == sp.gather_sent);
      CHECK(per_gather == (tp - 1) * btc_bytes / tp);
      CHECK(sp.scatter_sent + 4 * layers * per_gather == tp_comm.reduce_sent);
      CHECK(tp_comm.all_reduces == 4 * layers);
      // Activation memory: the layernorm/residual tensors at 1/t, and each peak is exactly the
      // lesson's formula for this model's saved tensors.
      const int64_t sp_peak = sp_peaks[static_cast<size_t>(rank)];
      const int64_t tp_peak = tp_peaks[static_cast<size_t>(rank)];
      CHECK(sp_peak < tp_peak);
      CHECK(sp_peak == lessons::activation_bytes(cfg, kBatch, kSeq, tp, true).peak);
      CHECK(tp_peak == lessons::activation_bytes(cfg, kBatch, kSeq, tp, false).peak);
    }
  }
}

TEST_CASE("the sequence helpers cut, gather and reduce-scatter tokens along T", "[sp][tokens]") {
  const int64_t b = 2, t = 6, c = 3;
  const int tp = 3;
  std::vector<float> full_values(static_cast<size_t>(b * t * c));
  for (size_t i = 0; i < full_values.size(); ++i) full_values[i] = float(i);
  std::vector<std::vector<float>> kept(tp), gathered(tp), scattered(tp);
  World world(WorldOptions{.ranks = tp, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    const int r = ctx.comm->rank();
    Tensor full = Tensor::from({b, t, c}, full_values);
    Tensor mine = Tensor::zeros({b, t / tp, c}, MemCategory::activations);
    keep_my_tokens(mine, full, r, tp);
    kept[static_cast<size_t>(r)] = mine.to_vector();
    Tensor back = Tensor::zeros({b, t, c}, MemCategory::activations);
    all_gather_sequence(back, mine, *ctx.comm);
    gathered[static_cast<size_t>(r)] = back.to_vector();
    Tensor summed = Tensor::zeros({b, t / tp, c}, MemCategory::activations);
    reduce_scatter_sequence(summed, full, *ctx.comm);  // every rank contributes `full`
    scattered[static_cast<size_t>(r)] = summed.to_vector();
  });
  for (int r = 0; r < tp; ++r) {
    INFO("rank " << r);
    std::vector<float> want;  // tokens [r*2, r*2+2) of each sequence
    for (int64_t s = 0; s < b; ++s)
      for (int64_t tok = r * (t / tp); tok < (r + 1) * (t / tp); ++tok)
        for (int64_t ch = 0; ch < c; ++ch) want.push_back(float((s * t + tok) * c + ch));
    CHECK(kept[static_cast<size_t>(r)] == want);
    CHECK(gathered[static_cast<size_t>(r)] == full_values);
    std::vector<float> tripled;
    for (float v : want) tripled.push_back(3 * v);
    CHECK(scattered[static_cast<size_t>(r)] == tripled);
  }
}

// The block's one backward run split (zero-bubble's B, then W) on tensor-parallel blocks: B's
// column-linear input gradients are partial sums that TensorParallelComm all-reduces (f's
// backward); B then W gives the whole backward's gradients bit for bit. Sequence-parallel blocks
// have no split backward, and say so.
TEST_CASE("the block's split backward (B, then W) gives its whole backward's gradients under TP",
          "[sp][tp][split]") {
  const int tp = 2;
  const GPTConfig cfg = small_model(*data::make_task("markov", 7, {.seq_len = kSeq}));
  std::vector<std::string> failures;
  std::mutex mutex;
  World world(WorldOptions{.ranks = tp, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    const int r = ctx.comm->rank();
    TensorParallelComm comm(*ctx.comm, ex::selected_seams().tp);
    auto make_block = [&] {
      Block block(cfg, 0, tp_slice(cfg, tp, r).block());
      split_block(block, cfg, tp_slice(cfg, tp, r));
      ParamList params;
      block.collect(params);
      materialise(params, cfg.seed, cfg.dtype);
      block.comm.linear = &comm;
      return block;
    };
    Block whole = make_block(), split = make_block();
    std::vector<float> values(static_cast<size_t>(kBatch * kSeq * cfg.dim));
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(float(i));
    const Tensor x = Tensor::from({kBatch, kSeq, cfg.dim}, values);
    BlockActivations whole_acts, split_acts;
    whole.forward(x, whole_acts);
    split.forward(x, split_acts);
    Tensor dx_whole = Tensor::zeros(x.shape(), MemCategory::workspace);
    Tensor dx_split = Tensor::zeros(x.shape(), MemCategory::workspace);
    whole.backward(dx_whole, whole_acts.out, whole_acts);
    BlockWeightGradInputs keep;
    split.backward_input(dx_split, split_acts.out, split_acts, keep);
    split.backward_weight(split_acts, keep);
    ParamList want, got;
    whole.collect(want);
    split.collect(got);
    std::lock_guard lock(mutex);
    if (dx_whole.to_vector() != dx_split.to_vector())
      failures.push_back("rank " + std::to_string(r) + " dx");
    for (size_t i = 0; i < want.size(); ++i)
      if (want[i]->grad.to_vector() != got[i]->grad.to_vector())
        failures.push_back("rank " + std::to_string(r) + " " + want[i]->name);
  });
  std::string differ;
  for (const std::string& f : failures) differ += f + "; ";
  INFO("differ: " << differ);
  CHECK(failures.empty());
  // Sequence parallelism refuses the split rather than computing a wrong input gradient.
  bool refused = false;
  World one(WorldOptions{.ranks = 1, .all_reduce = selected_all_reduce()});
  one.run([&](RankContext& ctx) {
    SequenceParallelComm sp(*ctx.comm, ex::selected_seams().tp);
    Linear linear;
    Tensor t;
    try {
      sp.column_backward_input(linear, t, t);
    } catch (const std::logic_error&) {
      refused = true;
    }
  });
  CHECK(refused);
}

TEST_CASE("a sequence that does not divide over the tp group is one clear line", "[sp]") {
  GPTConfig cfg;
  cfg.dim = 48;
  cfg.heads = 12;
  CHECK_THROWS_WITH(check_sp_size(cfg, 4, 10),
                    "sequence parallelism over 4 ranks cuts the sequence into 4 equal parts, but "
                    "--seq 10 is not a multiple of 4: use --seq 8 or 12");
  CHECK_THROWS_WITH(check_sp_size(cfg, 4, 3),
                    "sequence parallelism over 4 ranks cuts the sequence into 4 equal parts, but "
                    "--seq 3 is not a multiple of 4: use --seq 4");
  CHECK_NOTHROW(check_sp_size(cfg, 4, 12));
  CHECK_THROWS_AS(check_sp_size(cfg, 5, 10), std::invalid_argument);  // 5 does not divide heads
}

TEST_CASE("activation peaks equal the formula under every recompute mode", "[sp][memory]") {
  auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
    INFO("recompute " << recompute_name(mode));
    const GPTConfig cfg = small_model(*task, mode);
    std::vector<int64_t> tp_peaks, sp_peaks;
    one_step<tp_layout>(cfg, *task, 2, tp_peaks);
    one_step<sequence_parallel>(cfg, *task, 2, sp_peaks);
    for (int rank = 0; rank < 2; ++rank) {
      INFO("rank " << rank);
      CHECK(tp_peaks[size_t(rank)] == lessons::activation_bytes(cfg, kBatch, kSeq, 2, false).peak);
      CHECK(sp_peaks[size_t(rank)] == lessons::activation_bytes(cfg, kBatch, kSeq, 2, true).peak);
      CHECK(sp_peaks[size_t(rank)] < tp_peaks[size_t(rank)]);
    }
  }
}

// No path around exercise 06's seam: every one of sequence parallelism's linears, forward and
// backward, runs the table's functions (here the reference's, counted), 2 layers x 2 column and 2
// row linears per step; a table whose functions throw (the untouched stubs) stops the step.
TEST_CASE("sequence parallelism runs every linear through exercise 06's functions", "[sp][seam]") {
  const auto task = data::make_task("markov", 7, {.seq_len = kSeq});
  const GPTConfig cfg = small_model(*task);
  std::atomic<int> column_forward{0}, column_backward{0}, row_forward{0}, row_backward{0};
  const TpSeams reference = ex::selected_seams().tp;
  TpSeams counted = reference;
  counted.column_forward = [&](auto&... a) { ++column_forward, reference.column_forward(a...); };
  counted.column_backward = [&](auto&... a) { ++column_backward, reference.column_backward(a...); };
  counted.row_forward = [&](auto&... a) { ++row_forward, reference.row_forward(a...); };
  counted.row_backward = [&](auto&... a) { ++row_backward, reference.row_backward(a...); };
  TpSeams throwing = reference;
  throwing.column_backward = [](auto&...) { throw std::runtime_error("the stub"); };
  std::atomic<int> stopped{0};
  World world(WorldOptions{.ranks = 2, .all_reduce = selected_all_reduce()});
  world.run([&](RankContext& ctx) {
    auto layout = sequence_parallel(cfg, *ctx.comm, adamw, counted);
    (void)layout->step(task->sample(0, kBatch, kSeq), 0);
    auto stub = sequence_parallel(cfg, *ctx.comm, adamw, throwing);
    try {
      (void)stub->step(task->sample(0, kBatch, kSeq), 0);
    } catch (const std::runtime_error&) {
      ++stopped;
    }
  });
  const int per_rank = cfg.layers * 2, ranks = 2;
  CHECK(column_forward == per_rank * ranks);
  CHECK(column_backward == per_rank * ranks);
  CHECK(row_forward == per_rank * ranks);
  CHECK(row_backward == per_rank * ranks);
  CHECK(stopped == ranks);
}

}  // namespace test_sequence_parallel
