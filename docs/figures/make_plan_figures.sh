#!/usr/bin/env bash
# Regenerates the figure of docs/lessons/17-recommendations.md from real runs:
#   docs/figures/make_plan_figures.sh [BUILD_DIR]      (default: build-cpu)
# `mgpu plan` picks the best layout of GPT-3 6.7B on 16 GPUs (2 DGX H100 nodes, bf16, global
# batch 32); the hybrid lesson then runs exactly that layout (mesh, micro-batching, schedule,
# ZeRO, precision, recompute) as a full phantom run (every GPU a thread) with --trace, and the
# dashboard draws it. Prints the planner's step time and memory beside the full run's.
set -euo pipefail
source "$(dirname "$0")/figure_setup.sh" "$@"
"$mgpu" plan --model gpt3-6.7b --gpus 16 --global-batch 32 --top 1 --json 2>/dev/null >plan.json
read -r dp tp pp cp m schedule v zero precision recompute < <(python3 -c '
import json; l = json.load(open("plan.json"))["layouts"][0]
print(l["dp"], l["tp"], l["pp"], l["cp"], l["microbatches"], l["schedule"], l["virtual_stages"],
      l["zero"], l["precision"], l["recompute"])
print("planner: step %.4f s, %.2f GiB per GPU" % (l["step_seconds"], l["memory_bytes"]["total"] / 2**30),
      file=__import__("sys").stderr)')
vs=()
[ "$schedule" = interleaved ] && vs=(--virtual-stages "$v")
"$mgpu" run hybrid --device phantom --model gpt3-6.7b --ranks 16 --dp "$dp" --tp "$tp" \
  --pp "$pp" --cp "$cp" --microbatches "$m" --schedule "$schedule" "${vs[@]}" --zero "$zero" \
  --precision "$precision" --recompute "$recompute" --batch 32 --steps 2 --profile DGX-H100 \
  --trace plan-best.json | grep -A18 "^per rank" | sed 's/^/full run: /'
xvfb-run -a "$mgpu" viz plan-best.json \
  --title "mgpu-lab - the planner's best layout for GPT-3 6.7B on 2 DGX H100 nodes: dp $dp tp $tp pp $pp cp $cp, $schedule, ZeRO-$zero, $precision" \
  --screenshot "$figures/plan-best-gpt3-6.7b-16gpus.png" --width 1400
