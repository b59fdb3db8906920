#!/usr/bin/env bash
# What lane isolation costs: the same lane in-process (isolation = thread: a thread of the rank)
# and in a worker process (isolation = process), on configs/pp2.ini's model at pp = 2. Per lane and
# mode: lane steps in gaps, mean step time as the gap scheduler saw it (lane_s / steps, hand-over
# included), the cost a worker adds per step (process - thread), harvest after the profile
# iterations, and training time; medians over alternating rounds. Lanes: a plugin whose step spins
# a fixed time (the test suite's hostile plugin, mode none: 0 us measures the hand-over alone,
# 200 us is a typical small plugin step) and pagerank (a built-in, as isolation = process runs it).
# Prints the load average before and after: the timings mean nothing on a busy machine.
#   scripts/bench/lane_isolation.sh [--steps N] [--rounds R] [--lanes "spin0 spin200 pagerank"]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=30 rounds=3 lanes_list="spin0 spin200 pagerank"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --lanes) lanes_list=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "lane_isolation.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
source scripts/bench/common.sh
hostile=build/tests/lanes/libpipelane_hostile_lane.so

lane_args() {  # the flags that run lane $1 alone
  case "$1" in
    spin*) echo "--lanes.enabled=hostile --lanes.plugins=$hostile --lane.hostile.mode=none --lane.hostile.step_us=${1#spin}" ;;
    pagerank) echo "--lanes.enabled=pagerank --lane.pagerank.generate=rmat --lane.pagerank.scale=16 --lane.pagerank.slice_edges=65536 --lane.pagerank.tolerance=0 --lane.pagerank.max_iterations=1000000" ;;
  esac
}
lane_name() { case "$1" in spin*) echo hostile ;; *) echo "$1" ;; esac; }
train() {  # train DIR EXTRA...
  local dir=$1; shift
  mpirun --oversubscribe -np 2 build/pipelane train --config configs/pp2.ini --train.steps="$steps" \
    --train.warmup_steps=1 --train.eval_every=0 --run.dir="$dir" "$@" >"$dir.log" 2>&1 || { tail -5 "$dir.log" >&2; return 1; }
}
field() { /usr/bin/env python3 -c "import json,sys; d=json.load(open(sys.argv[1])); exec('print('+sys.argv[2]+')')" "$@"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); pp=2, $steps steps, medians of $rounds alternating rounds"
printf "%-11s %-8s %7s %12s %14s %9s %8s\n" lane mode steps "step_us" "added_us/step" harvest train_s
for lane in $lanes_list; do
  name=$(lane_name "$lane")
  declare -A step_us=() harvest=() train_s=() count=()
  for mode in thread process; do step_us[$mode]=""; harvest[$mode]=""; train_s[$mode]=""; count[$mode]=""; done
  for r in $(seq "$rounds"); do
    for mode in thread process; do
      d="$out/$lane-$mode-$r"
      train "$d" $(lane_args "$lane") --lanes.isolation=$mode --lanes.profile_iterations=2
      s="$d/summary.json"
      step_us[$mode]+=" $(field "$s" "1e6*d['lanes']['total']['lanes']['$name']['lane_s']/max(1,d['lanes']['total']['lanes']['$name']['steps'])")"
      count[$mode]+=" $(field "$s" "int(d['lanes']['total']['lanes']['$name']['steps'])")"
      harvest[$mode]+=" $(field "$s" "100*d['lanes']['total']['harvest_fraction_after_profiling']")"
      train_s[$mode]+=" $(field "$s" "d['train_seconds']")"
    done
  done
  thread_us=$(median ${step_us[thread]})
  for mode in thread process; do
    us=$(median ${step_us[$mode]})
    added=$([ $mode = process ] && echo "$us - $thread_us" | bc -l || echo 0)
    printf "%-11s %-8s %7s %12.1f %14.1f %8.1f%% %8.2f\n" "$lane" "$mode" "$(median ${count[$mode]})" "$us" "$added" \
      "$(median ${harvest[$mode]})" "$(median ${train_s[$mode]})"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "step_us: lane_s / steps in gaps over both ranks, as the scheduler measured it (the hand-over to the"
echo "lane's thread or worker included); added_us/step: process minus thread; harvest: after profiling."
