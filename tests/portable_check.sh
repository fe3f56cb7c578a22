#!/usr/bin/env bash
# The portability check (./dev.sh test-portable): re-runs the doc tests and the layout-equivalence
# tests with OpenBLAS forced to each kernel set this CPU can run, and with 1 and 2 BLAS threads, and
# reports every figure that changes. A figure that changes is float rounding: the page must mark it
# (`< BOUND` or `~VALUE`, tests/docs/run_docs.py) or the test must compare it within what the
# arithmetic determines. Developers run it before they stop; CI does not (it runs whatever the
# machine's OpenBLAS picks, and leaves OPENBLAS_CORETYPE as it finds it).
#
# Usage: tests/portable_check.sh BUILD_DIR [PAGE_REGEX]
set -uo pipefail
build=${1:?usage: tests/portable_check.sh BUILD_DIR [PAGE_REGEX]}
jobs=$(nproc 2>/dev/null || echo 2)
# The tests: every doc page (ctest label docs) and the layout-equivalence tests: each trains a
# layout and compares it with the single-device run (checkpoints, losses), so each is as exposed
# to the BLAS's sums as a page is; the graded exercises' reference runs too. PAGE_REGEX narrows
# the pages (the equivalence tests always run). A test_* name is a file of tests/unit, run as its
# cases in mgpu_unit_tests (Catch's file-name tag); a graded exercise is an executable of its own.
regex=${2:-}
equivalence=(test_single_device test_ddp test_zero test_zero_lesson test_tensor_parallel
  test_tensor_parallel_lesson test_sequence_parallel test_sequence_parallel_lesson
  test_context_parallel test_expert_parallel test_moe test_hybrid test_pipeline_executor
  test_pipeline_lesson test_lesson_checkpoints test_lesson_precision test_precision_lessons
  test_recompute test_loss_scaler)
for exe in "$build"/test_grade_ex*; do equivalence+=("$(basename "$exe")"); done

# Kernel sets: the oldest x86-64 one (SSE3), AVX2 + FMA, and AVX-512 where this CPU has it. A
# kernel set the CPU cannot run would die of an illegal instruction: it is skipped, and said so.
kernel_sets=(Prescott Haswell)
if grep -qw avx512f /proc/cpuinfo; then
  kernel_sets+=(SkylakeX)
else
  echo "==> skipping OPENBLAS_CORETYPE=SkylakeX: this CPU has no AVX-512 (avx512f)"
fi
if ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
  kernel_sets=(Prescott)
  echo "==> skipping OPENBLAS_CORETYPE=Haswell: this CPU has no AVX2/FMA"
fi

failed=()
for kernels in "${kernel_sets[@]}"; do
  for threads in 1 2; do
    combo="$kernels-$threads" log="$build/portable-$kernels-$threads.log"
    echo "==> OPENBLAS_CORETYPE=$kernels OPENBLAS_NUM_THREADS=$threads (log: $log)"
    export OPENBLAS_CORETYPE=$kernels OPENBLAS_NUM_THREADS=$threads
    (cd "$build" && xvfb-run -a ctest -L docs -LE slow-doc ${regex:+-R "$regex"} \
      --output-on-failure -j"$jobs" --timeout 600) >"$log" 2>&1
    echo "    doc pages: $(grep 'tests passed' "$log")"
    # Two test programs at a time; each prints Catch's summary, a failure names its test case.
    printf '%s\n' "${equivalence[@]}" | xargs -P "$jobs" -I{} sh -c \
      'out="$0/portable-$1-{}.out"
       case {} in test_grade_*) set -- "$0/{}" ;; *) set -- "$0/mgpu_unit_tests" -# "[#{}]" ;; esac
       "$@" >"$out" 2>&1 || echo "equivalence test failed: $out"' \
      "$build" "$combo" >>"$log"
    echo "    equivalence programs: $(grep -c 'equivalence test failed' "$log") of ${#equivalence[@]} failed"
    if grep -q '100% tests passed' "$log" && ! grep -q 'equivalence test failed' "$log"; then
      continue
    fi
    failed+=("$combo")
    # What changed: the doc harness's "shown, not in the output" lines, the failing tests.
    grep -E 'shown, not in the output|^\s*[0-9]+ - |equivalence test failed' "$log" |
      sed 's/^/    /'
  done
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "==> figures changed under: ${failed[*]} (mark them as rounding figures, see above)"
  exit 1
fi
echo "==> portable: every doc page and equivalence test passes under ${kernel_sets[*]} x 1, 2 threads"
