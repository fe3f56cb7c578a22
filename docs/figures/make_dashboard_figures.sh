#!/usr/bin/env bash
# Regenerates the dashboard figures of docs/dashboard.md from real lesson runs:
#   docs/figures/make_dashboard_figures.sh [BUILD_DIR]      (default: build-cpu)
# Two pipeline runs (GPipe and 1F1B, 4 ranks, 8 micro-batches, the lesson's default 20 steps),
# then `mgpu viz --screenshot` of each; the dashboard opens on the last step. No --height: every
# screenshot is as tall as its content (every rank's rows, memory strips and the summary).
set -euo pipefail
source "$(dirname "$0")/figure_setup.sh" "$@"
for schedule in gpipe 1f1b; do
  "$mgpu" run pipeline --ranks 4 --schedule "$schedule" --microbatches 8 \
    --profile 8xH100-NVLink --trace "$schedule.json" >/dev/null
done
xvfb-run -a "$mgpu" viz 1f1b.json --screenshot "$figures/dashboard-1f1b.png" --width 1400
xvfb-run -a "$mgpu" viz --compare gpipe.json 1f1b.json \
  --title "mgpu-lab - GPipe vs 1F1B, 4 GPUs, 8 micro-batches" \
  --screenshot "$figures/dashboard-gpipe-vs-1f1b.png" --width 1400
# Context parallelism: ring attention on 4 GPUs with contiguous chunks (the last GPU does most of
# the causal work) against zigzag chunks (balanced), 512-token sequences split four ways, on the
# laptop-cpu profile (slow enough that attention, not kernel latency, sets the step time); two
# steps, and the compare view shows each run's last step from 0 on the shared ruler.
for layout in contiguous zigzag; do
  "$mgpu" run context_parallel --cp 4 --cp-layout "$layout" --seq 512 --dim 32 --heads 4 \
    --batch 4 --steps 2 --compare off --profile laptop-cpu --trace "cp-$layout.json" >/dev/null
done
xvfb-run -a "$mgpu" viz --compare cp-contiguous.json cp-zigzag.json \
  --title "mgpu-lab - ring attention, 4 GPUs: contiguous vs zigzag chunks" \
  --screenshot "$figures/dashboard-cp-contiguous-vs-zigzag.png" --width 1400
# The same zigzag ring on the H100 profile, where a K/V hop is about 2 us of a 1.1 ms step:
# --zoom opens on two hops of the forward.
"$mgpu" run context_parallel --cp 4 --cp-layout zigzag --seq 512 --dim 32 --heads 4 --batch 4 \
  --steps 2 --compare off --profile 8xH100-NVLink --trace cp-h100.json >/dev/null
xvfb-run -a "$mgpu" viz cp-h100.json --zoom 15us..45us \
  --title "mgpu-lab - ring attention on 4 H100s, zoomed to two K/V hops" \
  --screenshot "$figures/dashboard-ring-attention-zoom.png" --width 1400
# Hybrid DP x TP x PP on 8 GPUs (dp 2, tp 2, pp 2, 1F1B, 4 micro-batches per replica): every
# row is one GPU; tp all-reduces inside each F/B, the pp sends between stages, and the one dp
# all-reduce before the optimizer.
"$mgpu" run hybrid --ranks 8 --dp 2 --tp 2 --pp 2 --profile 8xH100-NVLink --trace hybrid.json \
  >/dev/null
xvfb-run -a "$mgpu" viz hybrid.json --screenshot "$figures/dashboard-hybrid-2x2x2.png" \
  --width 1400
# The same run with the tp group of GPUs 2 and 3 (dp1 pp0) highlighted: rows carry their mesh
# coordinates, tp1's all-reduces stand out inside its members' forwards and backwards, the rest is
# dimmed.
xvfb-run -a "$mgpu" viz hybrid.json --highlight tp1 \
  --title "mgpu-lab - hybrid dp 2 x tp 2 x pp 2, tp group tp1 highlighted" \
  --screenshot "$figures/hybrid-mesh.png" --width 1400

# Classroom mode (no trace: the dashboard re-runs the pipeline lesson itself): the default sliders,
# and the instructor's projector command, GPipe and 1F1B side by side under the same sliders at
# 1920 wide in presentation mode (it fits 1080 rows).
xvfb-run -a "$mgpu" viz --set schedule=1f1b,stages=4,microbatches=8 \
  --screenshot "$figures/classroom.png" --width 1400
xvfb-run -a "$mgpu" viz --versus gpipe,1f1b --set stages=4,microbatches=8 --presentation \
  --screenshot "$figures/classroom-gpipe-vs-1f1b-1920.png" --width 1920

# Issue 50, "the classroom fits the room": six pipeline schedules compared side by side at
# 1920 wide (every table, bubble line and ruler readable), four schedules under the classroom's
# sliders on a 1920x1080 projector, and a 16-rank hybrid in presentation mode (its rows shrink,
# the memory strips give way, the summary splits into two blocks of 8 GPUs).
for schedule in gpipe 1f1b interleaved zb-h1 zbv dualpipev; do
  extra=()
  [ "$schedule" = interleaved ] && extra=(--virtual-stages 2)
  "$mgpu" run pipeline --ranks 4 --schedule "$schedule" --microbatches 8 "${extra[@]}" \
    --profile 8xH100-NVLink --steps 2 --trace "six-$schedule.json" >/dev/null
done
xvfb-run -a "$mgpu" viz --compare six-gpipe.json six-1f1b.json six-interleaved.json \
  six-zb-h1.json six-zbv.json six-dualpipev.json \
  --title "mgpu-lab - six pipeline schedules, 4 GPUs, 8 micro-batches" \
  --screenshot "$figures/dashboard-compare-six-1920.png" --width 1920 >/dev/null
xvfb-run -a "$mgpu" viz --versus gpipe,1f1b,zb-h1,dualpipev --set stages=4,microbatches=8 \
  --presentation --screenshot "$figures/classroom-versus-four-1920.png" --width 1920
"$mgpu" run hybrid --ranks 16 --dp 2 --tp 2 --pp 4 --profile 8xH100-NVLink --steps 2 \
  --trace hybrid16.json >/dev/null
xvfb-run -a "$mgpu" viz hybrid16.json --presentation \
  --title "mgpu-lab - hybrid dp 2 x pp 4 x tp 2 on 16 GPUs" \
  --screenshot "$figures/dashboard-hybrid-16-presentation-1920.png" --width 1920
