#!/usr/bin/env bash
# Regenerates the lesson pages' dashboard figures from the runs their captions name:
#   docs/figures/make_lesson_figures.sh [BUILD_DIR]      (default: build-cpu)
# README and 06-pipeline: the demo's 1F1B run (./dev.sh demo) and six schedules in theory mode;
# 07 and 08: tensor and sequence parallelism on 4 GPUs, 3 steps, as the captions say; 10: expert
# parallelism; 18: a straggler in DDP. Each screenshot is as tall as its content.
set -euo pipefail
source "$(dirname "$0")/figure_setup.sh" "$@"
"$mgpu" run pipeline --ranks 4 --schedule 1f1b --microbatches 8 --profile 8xH100-NVLink \
  --trace pipeline-1f1b.json >/dev/null
xvfb-run -a "$mgpu" viz pipeline-1f1b.json --screenshot "$figures/pipeline-1f1b-lesson.png" \
  --width 1400
# 06-pipeline's schedule figure: the five schedules of DualPipe's table and DualPipe itself, each
# `run pipeline --schedule S --theory` (4 stages, 8 micro-batches, F 1 ms, B 2 ms), stacked in
# rows on one time scale.
schedules=(gpipe 1f1b zb-h1 zbv dualpipev dualpipe)
for schedule in "${schedules[@]}"; do
  "$mgpu" run pipeline --schedule "$schedule" --theory --trace "$schedule.json" >/dev/null
done
xvfb-run -a "$mgpu" viz --compare "${schedules[@]/%/.json}" --layout rows \
  --title "mgpu-lab - GPipe, 1F1B, ZB-H1, ZB-V, DualPipeV, DualPipe: 4 stages, 8 micro-batches" \
  --screenshot "$figures/pipeline-schedules.png" --width 1400
for lesson in tensor_parallel sequence_parallel; do
  "$mgpu" run "$lesson" --ranks 4 --dim 256 --heads 8 --layers 4 --batch 16 --seq 64 --steps 3 \
    --trace "$lesson.json" >/dev/null
done
xvfb-run -a "$mgpu" viz tensor_parallel.json --screenshot "$figures/tensor-parallel-lesson.png" \
  --width 1400
xvfb-run -a "$mgpu" viz sequence_parallel.json \
  --screenshot "$figures/sequence-parallel-lesson.png" --width 1400
# 10: expert parallelism on 4 GPUs, 8 experts, top-2, 3 steps: the dispatch/combine all-to-alls
# labelled on the timeline and the tokens per expert under the summary.
"$mgpu" run expert_parallel --ranks 4 --experts 8 --top-k 2 --capacity-factor 1.25 --steps 3 \
  --skew 1 --trace expert_parallel.json >/dev/null
xvfb-run -a "$mgpu" viz expert_parallel.json --screenshot "$figures/expert-parallel-lesson.png" \
  --width 1400
# 18-faults: a straggler in DDP (rank 1 computes 2x slower, --overlap off, 3 steps): the others
# wait in the all-reduce.
"$mgpu" run ddp --ranks 4 --overlap off --slow-rank 1:2 --steps 3 -q --trace faults.json >/dev/null
xvfb-run -a "$mgpu" viz faults.json --screenshot "$figures/faults-straggler.png" --width 1400
