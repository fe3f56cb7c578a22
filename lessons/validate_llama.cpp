// `mgpu validate`'s Llama rows: Llama 3 405B's pre-training layouts (Dubey et al., "The Llama 3
// Herd of Models", 2024, table 4), published runs the profile was not fitted to, re-run on the
// DGX-H100 profile (the runs' GPUs: H100 80GB, eight per server) and reported with their error
// under Bound::unseen.
//
// The table states each run's GPUs, TP, CP, PP, the tokens per batch (16M) and the achieved
// TFLOP/s per GPU (430, 400, 380: BF16 MFU 43%, 41%, 38%); the data-parallel size is what the
// GPUs leave, GPUs / (TP CP PP), and the sequences per batch 2^24 / seq. What it does not state is
// pinned the engine's way and said in the row: micro-batch 1, 1F1B (126 layers do not cut into
// 16 x V equal chunks, which the interleaved schedule needs here; the paper's stages hold 7 or 8
// layers, theory::pipeline_stages_fit), ZeRO-1, sequence parallelism and the vocabulary-parallel
// head where the engine runs them, and the least activation recompute whose simulated peak fits
// the profile's memory. Figures are the model's FLOPs (PaLM's count, plan::Prediction's), as MFU
// is quoted.
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/plan/simulate.h"
#include "core/theory/schedule_kind.h"
#include "core/world/world.h"
#include "exercises/selection.h"
#include "lessons/plan.h"
#include "lessons/validate_clock.h"

namespace mgpu::lessons {

namespace {

struct Llama3Run {
  int gpus, tp, cp, pp, seq;
  double tflops_per_gpu;
};

// Table 4 as published: the two 8K-context stages, then the 128K long-context stage.
constexpr Llama3Run kLlama3Table4[] = {
    {8192, 8, 1, 16, 8192, 430},
    {16384, 8, 1, 16, 8192, 400},
    {16384, 8, 16, 16, 131072, 380},
};
constexpr int64_t kTokensPerBatch = int64_t{1} << 24;  // the table's "16M"

plan::Layout llama3_layout(const Llama3Run& r, const GPTConfig& model, const char* recompute) {
  const int dp = r.gpus / (r.tp * r.cp * r.pp);
  const int sequences = static_cast<int>(kTokensPerBatch / r.seq);
  plan::Layout l{.dp = dp,
                 .tp = r.tp,
                 .pp = r.pp,
                 .cp = r.cp,
                 .microbatch_size = 1,
                 .microbatches = sequences / dp,
                 .schedule = theory::schedule_name(theory::ScheduleKind::one_f_one_b),
                 .zero = 1,
                 .precision = "bf16",
                 .recompute = recompute};
  return plan::with_megatron_choices(model, l);
}

}  // namespace

void llama3_table4_rows(std::vector<Row>& rows, std::vector<std::string>& not_run) {
  const HardwareProfile h100 = HardwareProfile::load("DGX-H100");
  for (const Llama3Run& r : kLlama3Table4) {
    GPTConfig model = plan_model("llama3-405b").config;
    model.seq_len = r.seq;
    model.dtype = DType::bf16;
    const plan::Workload work{.model = model, .seams = ex::selected_seams().hybrid()};
    const std::string what = fmt::format("405B TFLOP/s per GPU, TP {} CP {} PP {} seq {}, {} GPUs",
                                         r.tp, r.cp, r.pp, r.seq, r.gpus);
    try {
      plan::Prediction p;
      std::string recompute;
      for (const char* mode : {"none", "selective", "full"}) {  // the least that fits
        p = plan::simulate(work, llama3_layout(r, model, mode), h100);
        recompute = mode;
        if (p.memory_peak_total <= h100.memory_capacity) break;
      }
      rows.push_back({"Dubey 2024 Table 4", fmt::format("{} (H100, {})", what, recompute),
                      r.tflops_per_gpu, p.tflops_per_gpu, Bound::unseen});
    } catch (const std::invalid_argument& e) {  // the engine refuses the layout (its one line)
      not_run.push_back(fmt::format("Dubey 2024 Table 4 {}: {}", what, e.what()));
    } catch (const RankError& e) {  // refused on a stage thread: "rank R: <the one line>"
      not_run.push_back(fmt::format("Dubey 2024 Table 4 {}: {}", what, e.what()));
    }
  }
}

}  // namespace mgpu::lessons
