#!/usr/bin/env bash
# mgpu vs PyTorch eager on one GPU, same GPT and settings; prints both and the ratio.
#   tests/bench/race.sh [BUILD_DIR] [-- options for both, e.g. --layers 12 --dim 768 --batch 4]
# Needs: a CUDA build (cmake --build build --target bench_vs_pytorch) and python3 with torch.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build}"
shift || true
[[ "${1:-}" == "--" ]] && shift
opts=("$@")
[[ ${#opts[@]} -eq 0 ]] && opts=(--layers 12 --dim 768 --heads 12 --seq 1024 --batch 4 --steps 20)

mgpu_out="$("$build/bench_vs_pytorch" "${opts[@]}")"
echo "$mgpu_out"
torch_out="$(python3 "$here/pytorch_gpt.py" "${opts[@]}")"
echo "$torch_out"
m=$(sed -n 's/^RESULT mgpu tokens_per_s=//p' <<<"$mgpu_out")
p=$(sed -n 's/^RESULT pytorch tokens_per_s=//p' <<<"$torch_out")
python3 -c "print(f'mgpu / pytorch = {float($m) / float($p):.2f}x  ({float($m):.0f} vs {float($p):.0f} tokens/s)')"
