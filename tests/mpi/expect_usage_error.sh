#!/bin/sh
# expect_usage_error.sh HEADLINE REGEX... -- COMMAND...: COMMAND (an mpirun job) must exit with
# code 2 (bad input), print HEADLINE (grep -E) on exactly one line, whichever process it comes
# from (one diagnosis, not one per rank), and match every REGEX. A hard `timeout` keeps a
# regression from hanging CI.
. "$(dirname "$0")/expect_lib.sh"
headline=$1
shift
read_regexes "$@"
shift $consumed
out=$(mktemp)
timeout -s KILL 120 "$@" >"$out" 2>&1
rc=$?
cat "$out"
status=0
[ "$rc" -eq 2 ] || { echo "FAIL: exit $rc, expected 2"; status=1; }
count=$(grep -Ec -- "$headline" "$out")
[ "$count" -eq 1 ] || { echo "FAIL: /$headline/ printed $count times, expected once"; status=1; }
check_regexes "$out" || status=1
rm -f "$out"
[ $status -eq 0 ] && echo "ok: exit 2 with one diagnosis"
exit $status
