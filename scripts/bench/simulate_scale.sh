#!/usr/bin/env bash
# How long `pipelane simulate` takes for a 10,000-GPU job: a ~100B GPT on 1248 nodes x 8 H100,
# pp 16 x tp 8 x dp 78 = 9984 GPUs, interleaved (v = 2), m = 32, lanes off and on. Data-parallel
# replicas are simulated once (parallel/README.md says why that is exact). Prints the simulator's own
# time (summary.json simulation.wall_s: building the schedules, simulating lanes off and on) and the
# whole command's, against the 1 s target.
#   scripts/bench/simulate_scale.sh [--iterations N]
set -euo pipefail
cd "$(dirname "$0")/../.."
iterations=5
while [ $# -gt 0 ]; do
  case "$1" in
    --iterations) iterations=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "simulate_scale.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
scripts/setup.sh
if [ -f build/CMakeCache.txt ]; then cmake --build build --target pipelane >/dev/null; else scripts/build.sh >/dev/null; fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf "%-48s %8s %12s %12s %10s %8s\n" job GPUs simulator_s command_s bubble target
for lanes in none scripts/repro/lanes/scale.jsonl; do
  start=$(date +%s.%N)
  build/pipelane simulate --config scripts/repro/models/gpt-100b.ini --cluster configs/clusters/dgx-h100-10k.ini \
    --lanes "$lanes" --iterations "$iterations" --trace-iterations 0 --out "$out" --quiet
  end=$(date +%s.%N)
  python3 - "$out/summary.json" "$start" "$end" "$lanes" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
wall, total = s["simulation"]["wall_s"], float(sys.argv[3]) - float(sys.argv[2])
p = s["parallel"]
job = f'pp {p["pp"]} x tp {p["tp"]} x dp {p["dp"]}, {p["schedule"]} v{p["virtual_stages"]}, m {p["microbatches"]}' + \
      (", lanes" if sys.argv[4] != "none" else "")
print(f'{job:48s} {s["simulation"]["world"]:8d} {wall:12.4f} {total:12.3f} {s["bubble_fraction_measured"]:10.4f} '
      f'{"< 1 s" if wall < 1 else "MISSED"}')
PY
done
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg); the simulator's time excludes reading configs and writing files)"
