#!/usr/bin/env bash
# Regenerates the ZeRO lesson's dashboard figures (docs/lessons/15-zero.md) from real runs:
#   docs/figures/make_zero_figures.sh [BUILD_DIR]      (default: build-cpu)
# One model whose states outweigh its activations (4 layers, dim 256, 8 sequences of 16 tokens) on
# 4 CPU virtual GPUs, trained at each ZeRO stage; then `mgpu viz --screenshot` of the last step:
#   zero-fsdp-lesson.png   stage 3 (FSDP) alone
#   zero-stages.png        stages 0, 1, 2, 3 stacked (--compare --layout rows): each rank's model
#                          states by category (--memory model-states), so the shards are visible
#                          on one vertical scale, so the optimizer, gradient and parameter bands
#                          shrink to 1/4 stage by stage
set -euo pipefail
source "$(dirname "$0")/figure_setup.sh" "$@"
for stage in 0 1 2 3; do
  "$mgpu" run zero --ranks 4 --stage "$stage" --layers 4 --dim 256 --heads 4 --seq 16 --batch 8 \
    --steps 4 --profile 8xH100-NVLink --trace "stage$stage.json" >/dev/null
done
xvfb-run -a "$mgpu" viz stage3.json --title "mgpu-lab - ZeRO-3 (FSDP), 4 GPUs, prefetch on" \
  --screenshot "$figures/zero-fsdp-lesson.png" --width 1400
xvfb-run -a "$mgpu" viz --compare stage0.json stage1.json stage2.json stage3.json \
  --title "mgpu-lab - ZeRO stages 0, 1, 2, 3 on 4 GPUs: memory by category per rank" \
  --layout rows --memory model-states --screenshot "$figures/zero-stages.png" --width 1400
