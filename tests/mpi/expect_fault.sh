#!/bin/sh
# expect_fault.sh MAX_SECONDS REGEX... -- COMMAND...: COMMAND must exit non-zero within
# MAX_SECONDS of the "fault injected at EPOCH" line it prints (launch time under a loaded host
# is not the backend's doing) and its combined output must match every REGEX (grep -E, line by
# line). A hard `timeout` keeps a regression from hanging CI.
max=$1
shift
regexes=""
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  regexes="$regexes
$1"
  shift
done
shift
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
echo "$regexes" | while IFS= read -r regex; do
  [ -z "$regex" ] && continue
  grep -Eq "$regex" "$out" || { echo "FAIL: output lacks /$regex/"; echo x >>"$out.missing"; }
done
[ -e "$out.missing" ] && status=1
rm -f "$out" "$out.missing"
[ $status -eq 0 ] && echo "ok: exit $rc after ${elapsed}s with the diagnosis"
exit $status
