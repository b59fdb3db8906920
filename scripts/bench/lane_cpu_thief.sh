#!/usr/bin/env bash
# What a lane that leaves a thread spinning costs training (lanes/README.md, the sandbox's cpu
# cgroup): configs/pp2.ini at pp = 2, three runs alternating per round: lanes off, a well-behaved
# plugin lane (tests/lanes/attack_plugin.c, mode none) and the CPU thief (mode spinner: a thread
# started in create() that spins forever), both in workers (isolation = process, the default for
# plugins). Prints each mode's median step time (summary.json's step_ms_median) over the rounds,
# side by side with the spread of the rounds (min-max) as the noise, and the load average before
# and after: the timings mean little on a busy machine.
#   scripts/bench/lane_cpu_thief.sh [--steps N] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=30 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "lane_cpu_thief.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
build_targets="--target pipelane --target pipelane_attack_lane1"  # the program and the plugin only
source scripts/bench/common.sh
attack=build/tests/lanes/libpipelane_attack_lane1.so
train() {  # train DIR EXTRA...
  local dir=$1; shift
  mpirun --allow-run-as-root --oversubscribe -np 2 build/pipelane train --config configs/pp2.ini --train.steps="$steps" \
    --train.warmup_steps=1 --train.eval_every=0 --run.dir="$dir" "$@" >"$dir.log" 2>&1 || { tail -5 "$dir.log" >&2; return 1; }
}
field() { /usr/bin/env python3 -c "import json,sys; d=json.load(open(sys.argv[1])); exec('print('+sys.argv[2]+')')" "$@"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
spread() { printf '%s\n' "$@" | sort -g | awk 'NR==1{lo=$1} {hi=$1} END {printf "%.1f-%.1f", lo, hi}'; }

declare -A ms=()
modes="off normal thief"
for m in $modes; do ms[$m]=""; done
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); pp=2, $steps steps, $rounds alternating rounds"
for r in $(seq "$rounds"); do
  for m in $modes; do
    d="$out/$m-$r"
    case $m in
      off) train "$d" ;;
      normal) train "$d" --lanes.enabled=attack1 --lanes.plugins=$attack --lane.attack1.mode=none ;;
      thief) train "$d" --lanes.enabled=attack1 --lanes.plugins=$attack --lane.attack1.mode=spinner ;;
    esac
    ms[$m]+=" $(field "$d/summary.json" "d['step_ms_median']")"
  done
done
printf "%-8s %16s %20s %s\n" mode "median step ms" "rounds min-max ms" "per round"
for m in $modes; do
  printf "%-8s %16.1f %20s %s\n" "$m" "$(median ${ms[$m]})" "$(spread ${ms[$m]})" "${ms[$m]}"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "thief within noise of normal: its median lies inside normal's min-max, or the two spreads overlap."
