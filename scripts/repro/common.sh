# Shared by scripts/repro/*.sh: build once, run `pipelane simulate` quietly, read its summary.json.
# Sourced, not run.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
figures="$repo/scripts/repro/figures"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/setup.sh
# A configured build only needs the program; a fresh clone gets the whole build.
if [ -f build/CMakeCache.txt ]; then cmake --build build --target pipelane >/dev/null; else scripts/build.sh >/dev/null; fi

# simulate OUT_DIR ARGS...: pipelane simulate with summary.json written to OUT_DIR.
simulate() {
  local out=$1
  shift
  build/pipelane simulate --out "$out" --quiet "$@"
}

# json FILE EXPR: a Python expression over the summary `s` (e.g. 's["step_ms_median"]').
json() {
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# plot GNUPLOT_SCRIPT: renders a PNG with gnuplot (installed by scripts/setup.sh).
plot() {
  gnuplot -e "set terminal pngcairo noenhanced size 800,450 font 'sans,11' background '#ffffff'" "$1"
}
