// `mgpu validate`'s unseen rows: published runs the profile was not fitted to, re-run as they
// were published and reported with their error, never held to a bound (docs/clock.md says where
// the clock is wrong on them and why).
//
// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", Table 1: GPT models from 1.7B to 1T parameters on up to 3072 A100 80GB (DGX A100
// nodes of 8), sequence 2048, vocabulary 51200, fp16, full activation recomputation. The table
// gives tensor- and pipeline-parallel sizes, GPUs and batch; the micro-batch size and the
// interleaving (layers per virtual stage) are the authors' reproduction script's
// (examples/sc21/run_table_1.sh in NVIDIA/Megatron-LM). Its figure is TFLOP/s per GPU counted by
// the paper's equation 3 (recompute included), which is how the prediction is counted too.
#include <vector>

#include <fmt/format.h>

#include "core/plan/simulate.h"
#include "core/theory/model_states.h"
#include "core/theory/schedule_kind.h"
#include "exercises/selection.h"
#include "lessons/validate_clock.h"

namespace mgpu::lessons {

namespace {

struct PublishedRun {
  const char* name;
  int layers, dim, heads;
  int tp, pp, gpus, batch;
  int microbatch, virtual_stages;  // the reproduction script's; V 1: no interleaving
  double tflops_per_gpu;
};

// Table 1 as published (its "Model size" column names the row).
constexpr PublishedRun kTable1[] = {
    {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 1, 137},
    {"3.6B", 30, 3072, 32, 2, 1, 64, 512, 16, 1, 138},
    {"7.5B", 36, 4096, 32, 4, 1, 128, 512, 16, 1, 142},
    {"18.4B", 40, 6144, 48, 8, 1, 256, 1024, 8, 1, 135},
    {"39.1B", 48, 8192, 64, 8, 2, 512, 1536, 4, 1, 138},
    {"76.1B", 60, 10240, 80, 8, 4, 1024, 1792, 2, 3, 140},
    {"145.6B", 80, 12288, 96, 8, 8, 1536, 2304, 2, 2, 148},
    {"310.1B", 96, 16384, 128, 8, 16, 1920, 2160, 1, 2, 155},
    {"529.6B", 105, 20480, 128, 8, 35, 2520, 2520, 1, 3, 163},
    {"1008.0B", 128, 25600, 160, 8, 64, 3072, 3072, 1, 1, 163},
};

// The run's layout as the script pins it: Megatron-LM's choices (the vocabulary-parallel head,
// partial sums in the activations' type) without sequence parallelism, which came a year later.
plan::Layout published_layout(const PublishedRun& r, const GPTConfig& model) {
  using theory::ScheduleKind;
  const int dp = r.gpus / (r.tp * r.pp);
  plan::Layout l{.dp = dp,
                 .tp = r.tp,
                 .pp = r.pp,
                 .microbatch_size = r.microbatch,
                 .microbatches = r.batch / (dp * r.microbatch),
                 .schedule = theory::schedule_name(
                     r.virtual_stages > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b),
                 .virtual_stages = r.virtual_stages,
                 .precision = "fp16",
                 .recompute = "full"};
  l = plan::with_megatron_choices(model, l);
  l.sp = false;
  return l;
}

}  // namespace

void narayanan_table1_rows(const HardwareProfile& profile, std::vector<Row>& rows) {
  for (const PublishedRun& r : kTable1) {
    GPTConfig model = megatron_model(r.layers, r.dim, r.heads);
    model.dtype = DType::f16;
    const plan::Layout layout = published_layout(r, model);
    const plan::Prediction p =
        plan::simulate({.model = model, .seams = ex::selected_seams().hybrid()}, layout, profile);
    const double flops =
        theory::megatron_recompute_flops(r.batch, model.seq_len, r.layers, r.dim, model.vocab);
    rows.push_back(
        {"Narayanan 2021 Table 1",
         fmt::format("{} TFLOP/s per GPU, TP {} PP {}{} mbs {}, {} GPUs", r.name, r.tp, r.pp,
                     r.virtual_stages > 1 ? fmt::format(" V {}", r.virtual_stages) : "",
                     r.microbatch, r.gpus),
         r.tflops_per_gpu, flops / (p.step_seconds * r.gpus) / 1e12, Bound::unseen});
  }
}

}  // namespace mgpu::lessons
