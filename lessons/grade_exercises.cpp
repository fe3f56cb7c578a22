// The exercise table, one function per exercise. The hints are short forms of the "Hints" of
// docs/exercises/NN-*.md, the most specific first; the first of each is the general one.
#include "lessons/grade_exercises.h"

namespace mgpu::lessons {

namespace {

ExerciseInfo ex01_ring_all_reduce() {
  return {"ex01",
          "ring all-reduce",
          "docs/exercises/01-ring-all-reduce.md",
          {{"",
            "cut the tensor into N chunks with comm::chunk_range; N-1 reduce-scatter steps, then "
            "N-1 all-gather steps, always send right and receive from the left"},
           {"avg", "for avg, sum first and divide once at the end"},
           {"in place",
            "take each chunk as a view with t.flat_range(begin, end) and reduce into it; "
            "touch nothing outside the tensor you were given"},
           {"bandwidth", "send one chunk (about 1/N of the buffer) per step, 2(N-1) steps in all"}},
          "exercises/ring_all_reduce.cpp",
          "every all-reduce of the DDP and data-parallel lessons, and `mgpu run collectives`"};
}

ExerciseInfo ex02_ddp_buckets() {
  return {"ex02",
          "DDP gradient buckets",
          "docs/exercises/02-ddp-buckets.md",
          {{"",
            "walk the tensors in backward order; close the bucket when the next tensor would "
            "push it past bucket_bytes"},
           {"oversized", "an empty bucket always takes the next tensor, however large"},
           {"edge cases",
            "no tensors: no buckets; don't forget to push the last, partly full "
            "bucket"}},
          "exercises/ddp_buckets.cpp",
          "the DDP lesson's buckets and when each is all-reduced"};
}

ExerciseInfo ex03_pipeline_schedules() {
  return {
      "ex03",
      "pipeline schedules",
      "docs/exercises/03-pipeline-schedules.md",
      {{"GPipe",
        "GPipe: every forward F0..F(M-1), then every backward in micro-batch order "
        "B0 B1 ... B(M-1)"},
       {"1F1B",
        "1F1B: stage s warms up with min(M, P-s-1) forwards, then repeats F(next) "
        "B(oldest) while forwards remain, then drains the backwards oldest first"},
       {"ZB-V",
        "ZB-V: stage s warms up with 2(P-s)-1 chunk-0 forwards, runs F B W on chunk 1 as soon as "
        "the V turns, then F B W on chunk 0 and chunk 1 in turn; B's before W's in the drain"},
       {"reference",
        "backwards run in the order the gradients arrive from the next stage: "
        "micro-batch 0, 1, 2, ... in both schedules"}},
      "exercises/pipeline_schedules.cpp",
      "the GPipe and 1F1B schedules of `mgpu run pipeline`"};
}

ExerciseInfo ex04_bubble_accounting() {
  return {"ex04",
          "bubble accounting",
          "docs/exercises/04-bubble-accounting.md",
          {{"",
            "clip each compute-lane event to [t0, t1], sort by start and merge overlaps; "
            "idle = span - merged length"},
           {"clipped",
            "begin = max(start, t0), end = min(start + dur, t1); drop it if end <= "
            "begin"},
           {"one entry per rank",
            "one result per rank, also for ranks with no events; only the "
            "compute lane counts as busy"}},
          "exercises/bubble_accounting.cpp",
          "the \"measured\" bubble column of `mgpu run pipeline`"};
}

ExerciseInfo ex05_memory_estimator() {
  return {"ex05",
          "memory estimator",
          "docs/exercises/05-memory-estimator.md",
          {{"",
            "bytes per parameter: fp32 4+4+8, mixed bf16 2+4+12; ZeRO stage k shards the last "
            "k of (optimizer, gradients, parameters) to ceil(params / dp)"},
           {"gpt_param_count",
            "embeddings V*C + T*C; each block 12C^2 + 13C; head: a LayerNorm "
            "(2C) and V*C without bias"}},
          "exercises/memory_estimator.cpp",
          "the \"predicted\" memory table of `mgpu run single_device`"};
}

ExerciseInfo ex06_tensor_parallel() {
  return {"ex06",
          "tensor-parallel linear",
          "docs/exercises/06-tensor-parallel.md",
          {{"column",
            "column: c.gather(x) (f's forward), then the local linear; backward: gather x "
            "again, the local linear's backward into c.partial_buffer(dx), then c.sum(dx, ...)"},
           {"row",
            "row: the local linear (bias only where given) into c.partial_buffer(y), then "
            "c.sum(y, ...); backward: c.gather(dy) (g's backward), then the linear backward"},
           {"sequence",
            "sequence parallelism: use only c's gather, partial_buffer and sum (never the tp "
            "group's all-reduce): there x, dx, y and dy are this rank's tokens"},
           {"Llama",
            "a Llama block has no biases: b_local, b, db_local and db are Tensor() on every rank; "
            "pass them straight to ops::linear_forward / linear_backward, which skip them"}},
          "exercises/tensor_parallel.cpp",
          "every column- and row-parallel linear of `mgpu run tensor_parallel` and "
          "`mgpu run sequence_parallel`"};
}

ExerciseInfo ex07_online_softmax_merge() {
  return {"ex07",
          "online-softmax merge",
          "docs/exercises/07-online-softmax-merge.md",
          {{"",
            "lse = m + log(exp(lse_a - m) + exp(lse_b - m)), m the larger; out = exp(lse_a - "
            "lse) out_a + exp(lse_b - lse) out_b"},
           {"-inf", "lse = -inf weighs 0; when both parts are -inf leave out and lse as they are"},
           {"overflow", "never compute exp(lse) itself: subtract m = max(lse_a, lse_b) first"},
           {"backward",
            "with w = exp(lse_part - lse): d_part_out = w dout, d_part_lse = w * sum "
            "over the head's channels of dout * (out_part - out)"}},
          "exercises/online_softmax_merge.cpp",
          "every merge of ring attention in `mgpu run context_parallel` (contiguous, zigzag)"};
}

ExerciseInfo ex08_zero_shard_step() {
  return {"ex08",
          "ZeRO-1 sharded optimizer step",
          "docs/exercises/08-zero-sharded-step.md",
          {{"",
            "own comm::chunk_range's chunk; reduce_scatter (avg) into a chunk-sized buffer and "
            "copy it into place, update, copy your chunk out and all_gather it into the whole "
            "parameters"},
           {"owned chunks",
            "chunk r of N is comm::chunk_range(numel, N, r), as the collectives "
            "cut it"}},
          "exercises/zero_shard_step.cpp",
          "every unit's chunks and stage 1's step in `mgpu run zero`"};
}

ExerciseInfo ex09_moe_dispatch() {
  return {"ex09",
          "MoE dispatch",
          "docs/exercises/09-moe-dispatch.md",
          {{"",
            "per token: its top_k experts by probability (a stable sort of the expert indices "
            "keeps ties lower-first), weights p / (sum of its top_k p); then capacity, order "
            "and counts"},
           {"capacity",
            "per group, offer slots choice by choice (all first choices in token order, then "
            "all second choices), an expert keeping at most `capacity`; capacity 0 keeps all"},
           {"order",
            "order = the kept slots by expert, then by slot (over every group); position[slot] "
            "= its index in order, -1 when dropped"},
           {"send counts",
            "send_counts[j] = kept slots of experts [j*E/ranks, (j+1)*E/ranks); dropped slots "
            "are not sent"}},
          "exercises/moe_dispatch.cpp",
          "every MoE layer's routing in `mgpu run expert_parallel` (and any lesson with "
          "--experts)"};
}

ExerciseInfo ex10_checkpoint_interval() {
  return {"ex10",
          "checkpoint interval",
          "docs/exercises/10-checkpoint-interval.md",
          {{"",
            "waste ~ C / tau + tau / (2 M): set its derivative to 0, tau* = sqrt(2 C M); refuse "
            "a cost or MTBF that is not finite and > 0"},
           {"lost work",
            "the last checkpoint holds step floor(S / every) x every (0 when every is 0); the "
            "work lost is the steps since it times the step time"}},
          "exercises/checkpoint_interval.cpp",
          "the lost work and the optimum interval of `mgpu run faults`"};
}

}  // namespace

const std::vector<ExerciseInfo>& exercises() {
  static const std::vector<ExerciseInfo> list = {
      ex01_ring_all_reduce(),      ex02_ddp_buckets(),      ex03_pipeline_schedules(),
      ex04_bubble_accounting(),    ex05_memory_estimator(), ex06_tensor_parallel(),
      ex07_online_softmax_merge(), ex08_zero_shard_step(),  ex09_moe_dispatch(),
      ex10_checkpoint_interval()};
  return list;
}

}  // namespace mgpu::lessons
