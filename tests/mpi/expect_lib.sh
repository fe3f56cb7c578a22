# Sourced by expect_fault.sh and expect_usage_error.sh: "REGEX... -- COMMAND..." argument lists.
# read_regexes "$@": sets $regexes (one per line) and $consumed (how many arguments to shift,
# the "--" included). check_regexes FILE: prints a FAIL line for each regex FILE lacks (grep -E,
# line by line); false if any.
read_regexes() {
  regexes=""
  consumed=0
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
    regexes="$regexes
$1"
    shift
    consumed=$((consumed + 1))
  done
  consumed=$((consumed + 1))
}

check_regexes() {
  missing=0
  newline='
'
  rest=$regexes
  while [ -n "$rest" ]; do
    regex=${rest%%"$newline"*}
    [ "$regex" = "$rest" ] && rest="" || rest=${rest#*"$newline"}
    [ -z "$regex" ] && continue
    grep -Eq -- "$regex" "$1" || { echo "FAIL: output lacks /$regex/"; missing=1; }
  done
  [ $missing -eq 0 ]
}
