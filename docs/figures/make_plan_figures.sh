#!/usr/bin/env bash
# Regenerates the figure of docs/lessons/17-recommendations.md from real runs:
#   docs/figures/make_plan_figures.sh [BUILD_DIR]      (default: build-cpu)
# `mgpu plan` picks the best layout of GPT-3 6.7B on 16 GPUs (2 DGX H100 nodes, fp32: what the
# hybrid lesson trains today, global batch 32); the hybrid lesson then runs exactly that layout
# as a full phantom run (every GPU a thread) with --trace, and the dashboard draws it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mgpu="$root/${1:-build-cpu}/mgpu"
figures="$root/docs/figures"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$mgpu" plan --model gpt3-6.7b --gpus 16 --precision fp32 --global-batch 32 --top 1 --json \
  2>/dev/null >plan.json
read -r dp tp pp mbs m schedule < <(python3 -c '
import json; l = json.load(open("plan.json"))["layouts"][0]
print(l["dp"], l["tp"], l["pp"], l["microbatch_size"], l["microbatches"], l["schedule"])')
"$mgpu" run hybrid --device phantom --model gpt3-6.7b --ranks 16 --dp "$dp" --tp "$tp" \
  --pp "$pp" --microbatches "$m" --schedule "$schedule" --batch 32 --steps 2 \
  --profile DGX-H100 --trace plan-best.json >/dev/null
xvfb-run -a "$mgpu" viz plan-best.json \
  --title "mgpu-lab - the planner's best layout for GPT-3 6.7B on 2 DGX H100 nodes: dp $dp tp $tp pp $pp" \
  --screenshot "$figures/plan-best-gpt3-6.7b-16gpus.png" --width 1400 --height 1300
