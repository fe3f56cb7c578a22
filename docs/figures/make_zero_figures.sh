#!/usr/bin/env bash
# Regenerates the ZeRO lesson's dashboard figure (docs/lessons/15-zero.md) from a real run:
#   docs/figures/make_zero_figures.sh [BUILD_DIR]      (default: build-cpu)
# Stage 3 (FSDP) on 4 CPU virtual GPUs, a model whose states outweigh its activations (4 layers,
# dim 256, 8 sequences of 16 tokens), then `mgpu viz --screenshot` of its last step.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mgpu="$root/${1:-build-cpu}/mgpu"
figures="$root/docs/figures"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$mgpu" run zero --ranks 4 --stage 3 --layers 4 --dim 256 --heads 4 --seq 16 --batch 8 --steps 4 \
  --profile 8xH100-NVLink --trace fsdp.json >/dev/null
xvfb-run -a "$mgpu" viz fsdp.json --title "mgpu-lab - ZeRO-3 (FSDP), 4 GPUs, prefetch on" \
  --screenshot "$figures/zero-fsdp-lesson.png" --width 1400 --height 900
