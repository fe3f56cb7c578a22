#!/usr/bin/env bash
# Runs the GPU checklist of docs/cuda.md in one go on a machine with a GPU; stops at the first
# failure. Usage: tests/gpu/run_gpu_checks.sh [BUILD_DIR]   (after cmake --build BUILD_DIR)
set -euo pipefail
build="${1:-build}"
step() { echo; echo "=== $* ==="; }

step "1. GPU tests";            ctest --test-dir "$build" -L gpu --output-on-failure
step "2. CUDA build unit test"; ctest --test-dir "$build" -R "install|exit 2" --output-on-failure
step "3. one GPU, single_device"
"$build/mgpu" run single_device --device cuda --steps 20
"$build/mgpu" run single_device --device cpu --steps 20
step "4. cuda clock + trace";   "$build/mgpu" run single_device --device cuda --clock cuda --steps 5 --trace /tmp/mgpu_cuda_trace.json
step "5. calibrate";            "$build/mgpu" calibrate --out /tmp/mgpu_profile.json
"$build/mgpu" run single_device --profile /tmp/mgpu_profile.json --steps 5
if command -v compute-sanitizer >/dev/null; then
  step "6. compute-sanitizer memcheck (one step)"
  compute-sanitizer --tool memcheck --error-exitcode 1 "$build/mgpu" run single_device --device cuda --steps 1
  compute-sanitizer --tool memcheck --error-exitcode 1 "$build/test_gpu_ops"
fi
step "7. race vs PyTorch (skipped without torch)"
if python3 -c "import torch" 2>/dev/null; then "$(dirname "$0")/../bench/race.sh" "$build"; fi
echo; echo "all GPU checks ran"
