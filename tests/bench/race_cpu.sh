#!/usr/bin/env bash
# mgpu vs PyTorch eager on the CPU: the same GPT, batch and AdamW step, one step at a time, wall
# clock, in one run; prints tokens/s of both and the ratio, for the lessons' tiny model and a
# ~10M-parameter one. Not a test (CI never runs it): timings on a shared host are noisy.
# Fair by construction: both sides build the model, initialise the weights, make the batch and
# allocate outside the timed region, run the same warm-up steps untimed, then time only the
# steady-state steps (zero_grad, forward, backward, AdamW, the loss back on the host).
#   tests/bench/race_cpu.sh [BUILD_DIR]      (needs: cmake --build BUILD_DIR --target bench_vs_pytorch)
# Installs Debian's python3-torch itself when `import torch` fails (apt-get, needs root).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build-cpu}"
# The python that imports torch: the one on PATH, else Debian's (installing python3-torch).
py=python3
if ! "$py" -c "import torch" 2>/dev/null; then
  py=/usr/bin/python3
  if ! "$py" -c "import torch" 2>/dev/null; then
    echo "race_cpu.sh: installing python3-torch (Debian) for the PyTorch side"
    apt-get install -y -q python3-torch >/dev/null
  fi
fi
# Same threads on both sides: OpenBLAS (mgpu) and PyTorch's intra-op pool. One by default: a
# virtual GPU is one thread (the ranks share the cores), and one thread races the kernels rather
# than two thread pools on a shared host. THREADS=N gives PyTorch N threads; mgpu's rank always
# runs its GEMMs on one (core/ops/cpu/kernels.cpp), so only THREADS=1 is a like-for-like race.
threads="${THREADS:-1}"
export OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"

echo "timed: the steady-state steps only, after untimed warm-up steps, on both sides (weight init,"
echo "       batch and first allocations excluded); tokens/s = batch x seq x timed steps / seconds;"
echo "       per CPU second: the same over the process's CPU time (on a loaded host the wall clock"
echo "       also counts the time other processes held the core)"
race() {
  local label="$1"; shift
  echo "== $label: $* (threads: mgpu 1, pytorch $threads)"
  local m p
  m="$("$build/bench_vs_pytorch" --device cpu "$@")"
  echo "$m"
  p="$("$py" "$here/pytorch_gpt.py" --device cpu "$@")"
  echo "$p"
  python3 - "$(sed -n 's/^RESULT mgpu tokens_per_s=//p' <<<"$m")" \
    "$(sed -n 's/^RESULT pytorch tokens_per_s=//p' <<<"$p")" \
    "$(sed -n 's/^RESULT mgpu tokens_per_cpu_s=//p' <<<"$m")" \
    "$(sed -n 's/^RESULT pytorch tokens_per_cpu_s=//p' <<<"$p")" <<'PY'
import sys
m, p, mc, pc = map(float, sys.argv[1:])
print(f"mgpu / pytorch = {m / p:.2f}x  ({m:.0f} vs {p:.0f} tokens/s, wall clock)")
print(f"mgpu / pytorch = {mc / pc:.2f}x  ({mc:.0f} vs {pc:.0f} tokens per CPU second)")
PY
}
race "tiny (the lessons' default model)" --layers 2 --dim 64 --heads 4 --seq 64 --vocab 64 \
  --batch 8 --steps 50 --warmup 5
race "~10M parameters" --layers 4 --dim 384 --heads 6 --seq 256 --vocab 4096 --batch 4 \
  --steps 10 --warmup 2
