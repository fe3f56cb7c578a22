#!/bin/sh
# expect_fault.sh MAX_SECONDS REGEX... -- COMMAND...: COMMAND must exit non-zero within
# MAX_SECONDS of the "fault injected at EPOCH" line it prints (launch time under a loaded host
# is not the backend's doing) and its combined output must match every REGEX (grep -E, line by
# line). A hard `timeout` keeps a regression from hanging CI.
. "$(dirname "$0")/expect_lib.sh"
max=$1
shift
read_regexes "$@"
shift $consumed
out=$(mktemp)
start=$(date +%s)
timeout -s KILL $((max + 30)) "$@" >"$out" 2>&1
rc=$?
end=$(date +%s)
injected=$(sed -n 's/^fault injected at //p' "$out" | head -n 1)
elapsed=$((end - ${injected:-$start}))
cat "$out"
status=0
if [ "$rc" -eq 0 ]; then echo "FAIL: exited 0, expected non-zero"; status=1; fi
if [ "$elapsed" -gt "$max" ]; then echo "FAIL: took ${elapsed}s, limit ${max}s"; status=1; fi
check_regexes "$out" || status=1
rm -f "$out"
[ $status -eq 0 ] && echo "ok: exit $rc after ${elapsed}s with the diagnosis"
exit $status
