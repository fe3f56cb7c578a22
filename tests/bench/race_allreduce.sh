#!/usr/bin/env bash
# The local (threads) backend's ring all-reduce vs Open MPI's MPI_Allreduce on this machine: one
# run of bench_allreduce under mpirun per rank count races both on the same sizes, wall clock,
# busbw = 2(N-1)/N x bytes / time. Inside a run the contenders take turns, five races per size,
# and each column is the median (local / MPI beside its worst race): the host's load and where its
# cores run change by the second, so contenders timed minutes apart are not comparable. Prints
# the load before each run; repeat with RUNS=N and report the spread.
#   tests/bench/race_allreduce.sh [BUILD_DIR]   (needs: cmake --build BUILD_DIR --target bench_allreduce)
#   RANKS="2 4" RUNS=1 by default.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-$here/../../build-cpu}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for run in $(seq "${RUNS:-1}"); do
  for ranks in ${RANKS:-2 4}; do
    echo "== run $run, $ranks ranks; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    mpirun --oversubscribe -n "$ranks" "$build/bench_allreduce" "$ranks" | grep -v "^all-reduce busbw"
  done
done
