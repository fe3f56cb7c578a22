# Sourced by the make_*_figures.sh scripts (after `set -euo pipefail`): the repository root, the
# mgpu binary of BUILD_DIR ($1, default build-cpu), the figures folder, and a scratch folder,
# removed on exit, that the script then works in.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mgpu="$root/${1:-build-cpu}/mgpu"
figures="$root/docs/figures"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
