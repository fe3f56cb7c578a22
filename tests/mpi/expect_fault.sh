#!/bin/sh
# expect_fault.sh MAX_SECONDS REGEX COMMAND...: COMMAND must exit non-zero within MAX_SECONDS
# and print REGEX (grep -E) on its combined output. A hard `timeout` keeps it from hanging CI.
max=$1; regex=$2; shift 2
out=$(mktemp)
start=$(date +%s)
timeout -s KILL $((max + 30)) "$@" >"$out" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
cat "$out"
status=0
if [ "$rc" -eq 0 ]; then echo "FAIL: exited 0, expected non-zero"; status=1; fi
if [ "$elapsed" -gt "$max" ]; then echo "FAIL: took ${elapsed}s, limit ${max}s"; status=1; fi
if ! grep -Eq "$regex" "$out"; then echo "FAIL: output lacks /$regex/"; status=1; fi
rm -f "$out"
[ $status -eq 0 ] && echo "ok: exit $rc after ${elapsed}s with the diagnosis"
exit $status
