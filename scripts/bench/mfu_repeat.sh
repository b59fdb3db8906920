#!/usr/bin/env bash
# Runs the same training twice and prints the MFU each reported (against the hardware peak, and
# against the cached measured sgemm) and how far apart they are: identical runs should agree
# within 5% (they differ only by their own speed; the peaks do not move between runs).
#   scripts/bench/mfu_repeat.sh [--config FILE] [--steps N]   (default configs/pp2.ini in one process, 30 steps)
set -euo pipefail
cd "$(dirname "$0")/../.."
config=configs/pp2.ini
steps=30
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "mfu_repeat.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
source scripts/bench/common.sh
for run in 1 2; do
  build/pipelane train --config "$config" --parallel.pp=1 --train.steps="$steps" --train.warmup_steps=1 \
    --train.eval_every=0 --run.dir="$out/run$run" --run.resume=none >"$out/run$run.log" 2>&1 ||
    { cat "$out/run$run.log"; exit 1; }
done
/usr/bin/python3 - "$out/run1/summary.json" "$out/run2/summary.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
print(f"MFU against {a['peak_source']}")
print(f"  run 1 {100*a['mfu']:.2f}%   run 2 {100*b['mfu']:.2f}%   apart {100*abs(a['mfu']/b['mfu']-1):.1f}%")
if a.get("mfu_sgemm") is not None:
    print(f"MFU against {a['sgemm_source']}")
    print(f"  run 1 {100*a['mfu_sgemm']:.2f}%   run 2 {100*b['mfu_sgemm']:.2f}%   apart {100*abs(a['mfu_sgemm']/b['mfu_sgemm']-1):.1f}%")
print(f"tokens/s: {a['tokens_per_s']:.0f} and {b['tokens_per_s']:.0f}")
PY
