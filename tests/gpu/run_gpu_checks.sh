#!/usr/bin/env bash
# Runs the GPU checklist of docs/cuda.md in one go on a machine with a GPU; stops at the first
# failure. Usage: tests/gpu/run_gpu_checks.sh [BUILD_DIR]   (after cmake --build BUILD_DIR)
set -euo pipefail
build="$(cd "${1:-build}" && pwd)"
mgpu="$build/mgpu"
compare="$build/checkpoint_compare"
work="$(mktemp -d /tmp/mgpu_gpu_checks.XXXXXX)"
step() { echo; echo "=== $* ==="; }
unset MGPU_CUDA_EMULATION  # these checks are about the real GPU

# A tiny model every lesson can run, and what each lesson needs besides it (ranks, micro-batches,
# experts). More ranks than GPUs run in shared-GPU mode (the run says so); as many as GPUs, NCCL.
tiny=(--layers 4 --dim 16 --heads 2 --seq 8 --batch 8 -q)
lesson_args() {
  case "$1" in
    single_device | mixed_precision | activation_checkpointing) ;;
    collectives) echo "--ranks 2 --max-bytes 64KiB" ;;
    grad_accum) echo "--ranks 2 --accum 2" ;;
    pipeline) echo "--ranks 2 --microbatches 4" ;;
    expert_parallel) echo "--ranks 2 --experts 4" ;;
    hybrid) echo "--ranks 8 --dp 2 --tp 2 --pp 2" ;;
    *) echo "--ranks 2" ;;
  esac
}
# Every lesson of the registry (`mgpu list`) but the planner's, which runs on paper; then the
# paradigms' other variants: "lesson option value ...".
lessons=$("$mgpu" list | awk '/^  [a-z_]+ / && $1 != "recommendations" {print $1}')
variants=("zero --stage 1" "zero --stage 2" "context_parallel --cp-layout ulysses"
          "pipeline --schedule zb-h1")

step "1. GPU tests";            ctest --test-dir "$build" -L gpu --output-on-failure
step "2. CUDA build unit test"; ctest --test-dir "$build" -R "install|exit 2|emulated" --output-on-failure

# 3. Every lesson on cuda for a few steps. Those that train: the checkpoint against the cpu run's
# of the same configuration. fp32: within the cpu tests' reordering bound after 3 steps (2e-5,
# test_lesson_checkpoints.cpp). bf16: after one step, the cpu tests' bound for results that differ
# at a rounding step (test_lesson_precision.cpp): 99% within 2e-5, none beyond one AdamW update
# (2 x lr = 6e-3, + 2e-5).
step "3. every lesson on cuda vs cpu"
mapfile -t cases < <(printf '%s\n' $lessons "${variants[@]}")
for case in "${cases[@]}"; do
  read -r lesson options <<<"$case"
  read -r -a extra <<<"$(lesson_args "$lesson") $options"
  name="${case// /_}"
  case "$lesson" in
    collectives)  # trains nothing: its table checks every result ("correct" is never NO)
      "$mgpu" run collectives --device cuda "${extra[@]}" | tee "$work/collectives.txt"
      ! grep -q " NO$" "$work/collectives.txt" ;;
    mixed_precision | activation_checkpointing)  # side by side runs, no checkpoint
      "$mgpu" run "$lesson" --device cuda --steps 3 "${tiny[@]}" ;;
    *)
      for precision in fp32 bf16; do
        steps=3 && [ "$precision" = bf16 ] && steps=1
        for device in cpu cuda; do
          "$mgpu" run "$lesson" --device "$device" --steps $steps --precision $precision \
            "${tiny[@]}" "${extra[@]}" --checkpoint "$work/$name-$precision-$device.ckpt"
        done
        echo "$case --precision $precision: cuda vs cpu"
        if [ "$precision" = fp32 ]; then bounds=(2e-5); else bounds=(6.02e-3 2e-5 0.99); fi
        "$compare" "$work/$name-$precision-cuda.ckpt" "$work/$name-$precision-cpu.ckpt" \
          "${bounds[@]}"
      done ;;
  esac
done

step "5. cuda clock + trace";   "$mgpu" run single_device --device cuda --clock cuda --steps 5 --trace "$work/cuda_trace.json"
step "6. calibrate";            "$mgpu" calibrate --out "$work/profile.json"
"$mgpu" run single_device --profile "$work/profile.json" --steps 5
if command -v compute-sanitizer >/dev/null; then
  # One step of each paradigm (and the op tests) under memcheck (out-of-bounds and misaligned
  # accesses, leaks) and racecheck (shared-memory races inside a kernel).
  for tool in memcheck racecheck; do
    step "7. compute-sanitizer $tool (one step of each paradigm)"
    for lesson in $lessons; do
      [ "$lesson" = collectives ] && continue
      read -r -a extra <<<"$(lesson_args "$lesson")"
      echo "$tool: $lesson"
      compute-sanitizer --tool "$tool" --error-exitcode 1 \
        "$mgpu" run "$lesson" --device cuda --steps 1 "${tiny[@]}" "${extra[@]}" >/dev/null
    done
    compute-sanitizer --tool "$tool" --error-exitcode 1 "$build/test_gpu_ops"
  done
fi
step "8. race vs PyTorch (skipped without torch)"
if python3 -c "import torch" 2>/dev/null; then "$(dirname "$0")/../bench/race.sh" "$build"; fi
rm -rf "$work"
echo; echo "all GPU checks ran"
