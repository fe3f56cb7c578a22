#!/usr/bin/env bash
# Records what a restructuring must not change: the printed output, the --trace file and the
# --checkpoint file of every lesson's default run and of a named set of combinations.
#   tests/golden/record.sh MGPU OUTDIR      record with this binary (run it with the old one first)
#   diff -r OLD NEW                         afterwards: byte-identical, or each difference named
# Each run is one line below: a name, then the lesson and its options. A lesson that writes no
# checkpoint (collectives, plan-like lessons) is run with --trace only.
set -uo pipefail
mgpu=${1:?usage: record.sh MGPU OUTDIR}
out=${2:?usage: record.sh MGPU OUTDIR}
mkdir -p "$out"
mgpu=$(realpath "$mgpu")
cd "$out" || exit 2  # files are named relative to it, so two recordings print the same paths
ran=0 failed=0
launcher=()     # mpirun ... for the runs below that are one process per rank
record() {      # name lesson [options...]; files: name.txt (output + exit code), .trace.json, .ckpt
  local name=$1 lesson=$2
  shift 2
  local files=()  # the two lessons that compare several runs write neither file
  [[ ! $lesson =~ ^(mixed_precision|activation_checkpointing)$ ]] && files+=(--trace "$name.trace.json")
  [[ ! $lesson =~ ^(collectives|mixed_precision|activation_checkpointing)$ ]] &&
    files+=(--checkpoint "$name.ckpt")
  "${launcher[@]}" "$mgpu" run "$lesson" "$@" "${files[@]}" >"$name.txt" 2>&1
  local rc=$?
  echo "exit $rc" >>"$name.txt"
  # The one figure measured on this machine's wall clock, which no two runs share.
  sed -i -E 's/[0-9,]+ tokens\/s on this machine \([0-9.]+ [mu]?s wall\)/(wall clock)/' "$name.txt"
  ran=$((ran + 1))
  if ((rc != 0)); then failed=$((failed + 1)); echo "  $name: exit $rc" >&2; fi
}
steps=(--steps 3)
# Every lesson's default run (a few steps).
for lesson in single_device data_parallel ddp grad_accum model_parallel pipeline tensor_parallel \
  sequence_parallel context_parallel expert_parallel mixed_precision activation_checkpointing \
  zero hybrid; do
  e=(); [[ $lesson == expert_parallel ]] && e=(--experts 8)  # it needs a model with experts
  record "default-$lesson" "$lesson" "${e[@]}" "${steps[@]}"
done
record default-collectives collectives
# Every schedule (pipeline lesson and hybrid).
for s in gpipe 1f1b interleaved zb-h1 zbv dualpipev dualpipe; do
  v=(); [[ $s == interleaved ]] && v=(--virtual-stages 2)
  record "pipeline-$s" pipeline --schedule "$s" "${v[@]}" "${steps[@]}"
  n=(); [[ $s == dualpipe ]] && n=(--pp 2)
  record "hybrid-$s" hybrid --schedule "$s" "${v[@]}" "${n[@]}" "${steps[@]}"
done
# ZeRO 0-3, with and without prefetch.
for z in 0 1 2 3; do record "zero-$z" zero --stage "$z" "${steps[@]}"; done
record zero-3-noprefetch zero --stage 3 --prefetch off "${steps[@]}"
# TP, SP, CP in three layouts, EP.
record tp-4 tensor_parallel --ranks 4 "${steps[@]}"
record sp-2 sequence_parallel --ranks 2 "${steps[@]}"
for l in contiguous zigzag ulysses; do record "cp-$l" context_parallel --cp-layout "$l" "${steps[@]}"; done
record ep-4 expert_parallel --ranks 4 --experts 4 "${steps[@]}"
# Hybrid variants.
record hybrid-zero1 hybrid --zero 1 "${steps[@]}"
record hybrid-cp hybrid --ranks 8 --tp 2 --pp 1 --cp 2 "${steps[@]}"
record hybrid-sp hybrid --sp "${steps[@]}"
record hybrid-vocab hybrid --vocab-parallel-head "${steps[@]}"
record hybrid-ep hybrid --tp 1 --pp 2 --dp 4 --ep 2 --experts 4 "${steps[@]}"
# Precision and recompute.
for p in bf16 fp16; do
  record "single-$p" single_device --precision "$p" "${steps[@]}"
  record "hybrid-$p" hybrid --precision "$p" "${steps[@]}"
  record "zero3-$p" zero --stage 3 --precision "$p" "${steps[@]}"
done
for r in none selective full; do
  record "recompute-$r" hybrid --recompute "$r" "${steps[@]}"
done
# Under mpirun, three lessons (one process per rank).
if command -v mpirun >/dev/null; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  launcher=(mpirun --oversubscribe -n 2)
  record mpi-ddp ddp --ranks 2 "${steps[@]}"
  record mpi-pipeline pipeline --ranks 2 "${steps[@]}"
  launcher=(mpirun --oversubscribe -n 8)
  record mpi-hybrid hybrid --batch 16 "${steps[@]}"
  launcher=()
fi
echo "recorded $ran runs in $out ($failed exited non-zero: their output is recorded too)"
