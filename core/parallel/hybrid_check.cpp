// Checking a hybrid mesh before any rank builds it: every axis must divide what it splits, and
// a refusal names the meshes (or schedule options) that would work.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/parallel/hybrid.h"
#include "core/theory/pipeline_bubbles.h"
#include "core/theory/schedule_kind.h"

namespace mgpu::parallel {

namespace {

bool tp_fits(const GPTConfig& cfg, int tp) {
  return tp_divides(cfg, tp);
}

// "dp x tp x pp" meshes of `world_size` ranks this model can run (with the given cp).
std::string meshes_that_work(const GPTConfig& cfg, int world_size, int cp) {
  std::vector<std::string> works;
  const std::string with_cp = cp > 1 ? fmt::format(" --cp {}", cp) : "";
  for (int tp = 1; cp >= 1 && tp <= world_size / cp; ++tp)
    for (int pp = 1; pp <= world_size / (tp * cp); ++pp)
      if (world_size % (tp * pp * cp) == 0 && tp_fits(cfg, tp) &&
          theory::pipeline_stages_fit(cfg.layers, pp))
        works.push_back(
            fmt::format("--dp {} --tp {} --pp {}{}", world_size / (tp * pp * cp), tp, pp, with_cp));
  return works.empty() ? "none for this model" : fmt::format("{}", fmt::join(works, "; "));
}

// The expert axis: ep ranks carved out of dp, each holding experts / ep whole experts. What the
// experts do not run with (cp's ring attention, ZeRO over dp; zero-bubble's split backward is
// refused with the schedules) is refused here, before any rank builds.
void check_experts(const GPTConfig& cfg, const HybridOptions& o) {
  const MeshShape& m = o.mesh;
  if (cfg.experts <= 0) {
    if (m.ep > 1)
      throw std::invalid_argument(fmt::format(
          "--ep {} splits a model's experts over ranks, and this model is dense: add --experts "
          "E (a multiple of {}), or use --ep 1",
          m.ep, m.ep));
    return;
  }
  check_ep_size(cfg, m.dp, m.ep);  // ep divides the experts and the dp ranks
  if (m.cp > 1)
    throw std::invalid_argument(fmt::format(
        "--cp {} with experts: context parallelism does not run mixture-of-experts blocks; use "
        "--cp 1",
        m.cp));
  if (o.zero != 0)
    throw std::invalid_argument(fmt::format(
        "--zero {} with experts: ZeRO shards over dp, but expert gradients average over the "
        "dp / ep ranks that hold the same experts; use --zero 0",
        o.zero));
}

}  // namespace

bool splits_backward(const std::string& schedule) {
  const auto kind = theory::find_schedule(schedule);
  return kind && theory::traits(*kind).splits_backward;
}

namespace {

// Every mesh refusal ends with the meshes that would work on this many ranks.
[[noreturn]] void refuse_mesh(const GPTConfig& cfg, int world_size, int cp,
                              const std::string& what) {
  throw std::invalid_argument(fmt::format("{}: meshes that work on {} ranks: {}", what, world_size,
                                          meshes_that_work(cfg, world_size, cp)));
}

void check_mesh_shape(const GPTConfig& cfg, const MeshShape& m, int world_size) {
  auto fail = [&](const std::string& what) { refuse_mesh(cfg, world_size, m.cp, what); };
  if (m.tp < 1 || m.cp < 1 || m.dp < 1 || m.pp < 1 || m.ranks() != world_size)
    fail(fmt::format("mesh --dp {} --tp {} --pp {}{} holds {} ranks but the world has {}", m.dp,
                     m.tp, m.pp, m.cp != 1 ? fmt::format(" --cp {}", m.cp) : "",
                     int64_t{m.dp} * m.tp * m.pp * m.cp, world_size));
  if (m.cp > 1)  // zigzag: every sequence in 2cp equal chunks
    check_cp_size(cfg, cfg.seq_len, m.cp, CpLayout::zigzag);
  if (!tp_fits(cfg, m.tp))
    fail(fmt::format("--tp {} does not divide the {} heads{} and the MLP width {}", m.tp, cfg.heads,
                     cfg.kv_head_count() != cfg.heads
                         ? fmt::format(", the {} kv heads", cfg.kv_head_count())
                         : "",
                     cfg.ffn_hidden()));
  if (!theory::pipeline_stages_fit(cfg.layers, m.pp))
    fail(
        fmt::format("--pp {} does not divide the {} layers into equal stages (nor into stages "
                    "within {:.0f}% of equal)",
                    m.pp, cfg.layers, 100 * theory::kMaxStageImbalance));
}

// Interleaved 1F1B: V >= 2 chunks per stage that cut the layers evenly, and M >= pp.
void check_virtual_stages(const GPTConfig& cfg, const HybridOptions& o) {
  const MeshShape& m = o.mesh;
  const int V = o.virtual_stages;
  std::vector<int> works;  // chunk counts that cut every stage into equal chunks
  for (int v = 2; m.pp >= 1 && v * m.pp <= cfg.layers; ++v)
    if (cfg.layers % (m.pp * v) == 0) works.push_back(v);
  if (V < 2 || m.pp < 1 || cfg.layers % (m.pp * V) != 0)
    throw std::invalid_argument(fmt::format(
        "interleaved needs --virtual-stages V >= 2 with pp x V dividing the {} layers (got pp "
        "{} x V {}): {}",
        cfg.layers, m.pp, V,
        works.empty() ? std::string("use --schedule 1f1b")
                      : fmt::format("use --virtual-stages {}", fmt::join(works, " or "))));
  if (o.microbatches < m.pp)
    throw std::invalid_argument(fmt::format(
        "interleaved 1F1B needs at least as many micro-batches as the {} stages (got {}): use "
        "--microbatches {} or more, or --schedule 1f1b",
        m.pp, o.microbatches, m.pp));
}

// The schedule from the registry, and what it asks of the mesh and the micro-batches.
void check_schedule(const GPTConfig& cfg, const HybridOptions& o, int world_size) {
  const MeshShape& m = o.mesh;
  const auto kind = theory::find_schedule(o.schedule);
  if (!kind || !theory::traits(*kind).runs_on_mesh)
    throw std::invalid_argument(
        fmt::format("hybrid runs --schedule gpipe, 1f1b, interleaved, zb-h1, zbv, dualpipev or "
                    "dualpipe, got '{}'",
                    o.schedule));
  const theory::ScheduleTraits& schedule = theory::traits(*kind);
  const bool v_shape = schedule.v_shape;
  const int dualpipe_least = pipeline::min_microbatches(o.schedule, m.pp);
  if (schedule.bidirectional &&
      (m.pp % 2 != 0 || o.microbatches % 2 != 0 || o.microbatches < dualpipe_least))
    throw std::invalid_argument(
        fmt::format("dualpipe needs an even pp and an even number of micro-batches, at least "
                    "2 x pp (got pp {} and {}): use --pp {} --microbatches {}",
                    m.pp, o.microbatches, m.pp % 2 ? m.pp + 1 : m.pp,
                    std::max(2 * (m.pp + m.pp % 2), o.microbatches + o.microbatches % 2)));
  if (o.microbatches > pipeline::max_microbatches)  // a schedule lists every action (#33)
    throw std::invalid_argument(fmt::format(
        "{} micro-batches is more than the {} a schedule can hold: use --microbatches {} or fewer",
        o.microbatches, pipeline::max_microbatches, pipeline::max_microbatches));
  if (v_shape && cfg.layers % (2 * m.pp) != 0)
    refuse_mesh(
        cfg, world_size, m.cp,
        fmt::format("{} puts 2 chunks on each of the {} stages: 2 x pp must divide the {} layers",
                    o.schedule, m.pp, cfg.layers));
  if (splits_backward(o.schedule))  // B and W split apart
    refuse_experts(cfg, "--schedule " + o.schedule,
                   "zero-bubble's split backward has no MoE half; use --schedule 1f1b");
  if (v_shape && o.microbatches < pipeline::min_microbatches(o.schedule, m.pp))
    refuse_mesh(cfg, world_size, m.cp,
                fmt::format("{} with pp {} needs at least {} micro-batches (got {}): use "
                            "--microbatches {} or more, or --schedule zb-h1",
                            o.schedule, m.pp, pipeline::min_microbatches(o.schedule, m.pp),
                            o.microbatches, pipeline::min_microbatches(o.schedule, m.pp)));
  if (!schedule.takes_virtual_stages && o.virtual_stages != 1)
    throw std::invalid_argument(
        fmt::format("--virtual-stages {} only applies to the interleaved schedule: use "
                    "--virtual-stages 1, or --schedule interleaved",
                    o.virtual_stages));
  if (schedule.takes_virtual_stages) check_virtual_stages(cfg, o);
}

}  // namespace

void check_hybrid(const GPTConfig& cfg, const HybridOptions& o, int world_size, int global_batch) {
  const MeshShape& m = o.mesh;
  check_mesh_shape(cfg, m, world_size);
  check_schedule(cfg, o, world_size);
  check_experts(cfg, o);
  if (o.zero < 0 || o.zero > 3)
    throw std::invalid_argument(fmt::format(
        "hybrid runs --zero 0 (gradients all-reduced over dp) or 1, 2, 3 (ZeRO-1/2/3 over dp), "
        "got {}",
        o.zero));
  check_megatron_options(cfg, o);
  if (o.microbatches < 1 || global_batch % (m.dp * o.microbatches) != 0)
    throw std::invalid_argument(fmt::format(
        "batch {} does not split into dp {} x {} micro-batches: use --batch {} (or another "
        "--microbatches)",
        global_batch, m.dp, o.microbatches, m.dp * std::max(1, o.microbatches)));
}

}  // namespace mgpu::parallel
