#!/usr/bin/env bash
# Measured vs theoretical pipeline bubble fraction for pp = 2 and pp = 4, m = 2..16 microbatches,
# schedules 1f1b, interleaved (v = 2) and zb-h1, on configs/pp2.ini's model (uniform stages).
# pp = 4 runs 4 ranks on this 2-core machine: oversubscribed, so its table is labelled as such.
# Measured = mean over stages of idle / (compute window), the first step excluded; theoretical =
# the schedule's formula (ZB-H1's with the run's measured F, B, W times).
#   scripts/bench/bubbles.sh [--steps N] [--csv FILE] [--pp "2 4"] [--m "2 4 8 16"]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=6
csv=runs/bench-bubbles.csv
pps="2 4"
ms="2 4 8 16"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --pp) pps=$2; shift 2 ;;
    --m) ms=$2; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bubbles.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
source scripts/bench/common.sh
mkdir -p "$(dirname "$csv")"
echo "pp,oversubscribed,schedule,microbatches,theoretical,measured,difference_pp,tokens_per_s" >"$csv"
for pp in $pps; do
  over=no
  [ "$pp" -gt "$(nproc)" ] && over=yes
  echo
  if [ $over = yes ]; then
    echo "pp = $pp: $pp ranks on $(nproc) cores (OVERSUBSCRIBED: ranks time-share cores, so waits include"
    echo "         descheduling; not a measurement of the schedule alone)"
  else
    echo "pp = $pp: one core per rank"
  fi
  printf "%-12s %4s %12s %10s %8s %10s\n" schedule m theoretical measured diff tokens/s
  for sched in 1f1b interleaved zb-h1; do
    for m in $ms; do
      extra=()
      if [ $sched = interleaved ]; then
        [ $((m % pp)) -eq 0 ] || continue
        extra=(--parallel.virtual_stages=2)
      fi
      dir="$out/$pp-$sched-$m"
      mpirun --oversubscribe -np "$pp" build/pipelane train --config configs/pp2.ini \
        --parallel.pp="$pp" --parallel.schedule=$sched "${extra[@]}" --model.layers=8 \
        --train.global_batch=$((4 * m)) --train.steps="$steps" --train.warmup_steps=1 \
        --train.eval_every=0 --run.dir="$dir" >"$dir.log" 2>&1 || { tail -5 "$dir.log"; exit 1; }
      /usr/bin/env python3 - "$dir/summary.json" "$pp" "$over" "$sched" "$m" "$csv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
pp, over, sched, m, csv = sys.argv[2:]
th, me = s["bubble_fraction_theoretical"], s["bubble_fraction_measured"]
print(f"{sched:<12} {m:>4} {100*th:>11.1f}% {100*me:>9.1f}% {100*(me-th):>+7.1f} {s['tokens_per_s']:>10.0f}")
with open(csv, "a") as f:
    f.write(f"{pp},{over},{sched},{m},{th:.4f},{me:.4f},{100*(me-th):.2f},{s['tokens_per_s']:.0f}\n")
PY
    done
  done
done
echo
echo "CSV: $csv"
