#!/usr/bin/env bash
# Side-task lanes in pipeline bubbles vs the baselines a user would try instead.
# For pp = 2 (one core per rank; --pp 4 runs oversubscribed and is labelled so) and m microbatches,
# on configs/pp2.ini's model: training time with lanes off vs on (alternating runs, medians),
# overhead %, harvest % (lane time inside waits / wait time), FreeRide-style cost saving % gross
# (lane work valued at its dedicated one-core throughput from `pipelane lane-bench`, at the
# dedicated device's price, over the lanes-off training cost) and net (minus the extra training
# time's cost), lane throughput; and the same workload as a separate co-located process at normal
# priority and at nice 19: its training overhead and side-work throughput. Overhead and savings are
# those pipelane writes into each lanes-on run's summary.json ([lanes] baseline, dedicated and
# prices), medians over rounds. Prints one table and writes a CSV.
#   scripts/bench/lanes.sh [--steps N] [--rounds R] [--m "4"] [--lanes "pagerank ... mix"] [--pp 2]
#                          [--train-price P --dedicated-price Q]  (per hour; default: equal prices)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=20 rounds=3 ms="2 4 8" pp=2
lanes_list="pagerank imageproc smalltrain prefill command mix"
csv=runs/bench-lanes.csv
prices=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --m) ms=$2; shift 2 ;;
    --lanes) lanes_list=$2; shift 2 ;;
    --pp) pp=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    --train-price) prices+=(--lanes.train_price_per_hour="$2"); shift 2 ;;
    --dedicated-price) prices+=(--lanes.dedicated_price_per_hour="$2"); shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "lanes.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
source scripts/bench/common.sh
mkdir -p "$(dirname "$csv")"
printf '#!/bin/sh\ni=0\nwhile :; do i=$((i+1)); done\n' >"$out/burn.sh"
chmod +x "$out/burn.sh"

# Options of each lane (as --lane.NAME.key=value) and as lane-bench --set.
lane_opts() {
  case "$1" in
    # tolerance 0: iterate until max_iterations, a workload that lasts the whole run (at scale 16
    # it converged within the first second and the row measured nothing)
    pagerank) echo "generate=rmat scale=18 slice_edges=1048576 tolerance=0 max_iterations=1000000" ;;
    imageproc) echo "generate=100000" ;;
    smalltrain) echo "steps=1000000" ;;
    prefill) echo "rate_per_s=2000 requests=1000000" ;;
    command) echo "command=$out/burn.sh" ;;  # a CPU-bound external program
  esac
}
lane_args() {  # training flags enabling $1 (or every lane for "mix")
  local names=$1
  [ "$1" = mix ] && names="pagerank imageproc smalltrain prefill command"
  local args="--lanes.enabled=$(echo $names | tr ' ' ',') --lanes.memory_mb=128"
  for n in $names; do
    for kv in $(lane_opts $n); do args+=" --lane.$n.$kv"; done
  done
  echo "$args"
}
train() {  # train DIR EXTRA... -> prints train_seconds
  local dir=$1; shift
  mpirun --oversubscribe -np "$pp" build/pipelane train --config configs/pp2.ini --parallel.pp="$pp" \
    --train.global_batch=$((4 * m)) --train.steps="$steps" --train.warmup_steps=1 --train.eval_every=0 \
    --run.dir="$dir" "$@" >"$dir.log" 2>&1 || { tail -5 "$dir.log" >&2; return 1; }
}
field() { /usr/bin/env python3 -c "import json,sys; d=json.load(open(sys.argv[1])); exec('print('+sys.argv[2]+')')" "$@"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# Dedicated throughput of each lane alone on one core: the lane-bench lines that training's
# [lanes] dedicated reads to value lane work in summary.json.
for n in pagerank imageproc smalltrain prefill command; do
  sets=()
  for kv in $(lane_opts $n); do sets+=(--set "$kv"); done
  build/pipelane lane-bench $n "${sets[@]}" --seconds 3 --json >>"$out/dedicated.jsonl"
done

over=no; [ "$pp" -gt "$(nproc)" ] && over=yes
echo "pp=$pp$([ $over = yes ] && echo ' (OVERSUBSCRIBED: ranks share cores)'), $steps steps, medians of $rounds alternating runs"
echo "m,lane,oversubscribed,t_off_s,t_on_s,overhead_pct,step_median_overhead_pct,harvest_pct,harvest_after_profiling_pct,gross_saving_pct,net_saving_pct,lane_units_per_s,colo_overhead_pct,colo_units_per_s,nice19_overhead_pct,nice19_units_per_s" >"$csv"
printf "%3s %-11s %8s %8s %9s %9s %8s %8s %8s %8s %12s | %9s %11s | %9s %11s\n" m lane t_off t_on overhead step_ovh harvest harv_pp gross net "lane units/s" colo_ovh colo_units/s nice_ovh nice_units/s
for m in $ms; do
  for lane in $lanes_list; do
    offs=() ons=() harvest=() units=() overheads=() gross=() net=() step_overheads=() harvest_pp=()
    for r in $(seq "$rounds"); do
      train "$out/off-$m-$lane-$r"
      offs+=("$(field "$out/off-$m-$lane-$r/summary.json" 'd["train_seconds"]')")
      # Each lanes-on run is valued against the lanes-off run just before it, by pipelane itself:
      # summary.json's overhead and cost saving (trainer/run/lane_valuation.h).
      train "$out/on-$m-$lane-$r" $(lane_args $lane) --lanes.baseline="$out/off-$m-$lane-$r/summary.json" \
        --lanes.dedicated="$out/dedicated.jsonl" "${prices[@]}"
      s="$out/on-$m-$lane-$r/summary.json"
      ons+=("$(field "$s" 'd["train_seconds"]')")
      harvest+=("$(field "$s" 'd["lanes"]["total"]["harvest_fraction"]')")
      units+=("$(field "$s" 'd["lanes"]["total"]["cost_saving"]["value_device_s"]')")
      overheads+=("$(field "$s" '100*d["lanes"]["total"]["overhead"]["fraction"]')")
      step_overheads+=("$(field "$s" '100*d["lanes"]["total"]["overhead"]["step_median_fraction"]')")
      harvest_pp+=("$(field "$s" 'd["lanes"]["total"]["harvest_fraction_after_profiling"]')")
      gross+=("$(field "$s" '100*d["lanes"]["total"]["cost_saving"]["gross_fraction"]')")
      net+=("$(field "$s" '100*d["lanes"]["total"]["cost_saving"]["net_fraction"]')")
    done
    t_off=$(median "${offs[@]}"); t_on=$(median "${ons[@]}"); h=$(median "${harvest[@]}"); value=$(median "${units[@]}")
    overhead=$(median "${overheads[@]}"); gross_saving=$(median "${gross[@]}"); net_saving=$(median "${net[@]}")
    step_overhead=$(median "${step_overheads[@]}"); h_pp=$(median "${harvest_pp[@]}")
    # Co-located baselines: the lane as its own process for as long as training runs, next to a
    # lanes-off run, at normal priority and at nice 19.
    colo=() ; first=$lane; [ $lane = mix ] && first=imageproc
    sets=(); for kv in $(lane_opts $first); do sets+=(--set "$kv"); done
    for prio in 0 19; do
      nice -n $prio build/pipelane lane-bench $first "${sets[@]}" --seconds "$(echo "$t_off * 1.5 + 3" | bc)" --json >"$out/colo-$prio.json" &
      bg=$!
      sleep 0.5
      train "$out/colo-$m-$lane-$prio"
      t_colo=$(field "$out/colo-$m-$lane-$prio/summary.json" 'd["train_seconds"]')
      wait $bg || true
      ups=$(field "$out/colo-$prio.json" 'd["units"]/max(1e-9, d["step_s"])*d["step_s"]/(d["step_s"]+1e-9)')
      colo+=("$(echo "100*($t_colo-$t_off)/$t_off" | bc -l)" "$ups")
    done
    /usr/bin/env python3 - "$m" "$lane" "$over" "$t_off" "$t_on" "$h" "$value" "$overhead" "$gross_saving" "$net_saving" "$step_overhead" "$h_pp" "${colo[@]}" "$csv" <<'PY'
import sys
m, lane, over = sys.argv[1:4]
# overhead and savings: medians over rounds of summary.json's values (each on-run against the
# off-run before it); t_off and t_on: medians of the training times.
t_off, t_on, h, value, overhead, gross, net, step_ovh, h_pp = map(float, sys.argv[4:13])
c_ovh, c_ups, n_ovh, n_ups = map(float, sys.argv[13:17])
csv = sys.argv[17]
lane_ups = value / t_on if t_on > 0 else 0
print(f"{m:>3} {lane:<11} {t_off:8.2f} {t_on:8.2f} {overhead:+8.2f}% {step_ovh:+8.2f}% {100*h:7.1f}% {100*h_pp:7.1f}% {gross:+7.2f}% {net:+7.2f}% {lane_ups:12.3f} | {c_ovh:+8.2f}% {c_ups:11.4g} | {n_ovh:+8.2f}% {n_ups:11.4g}")
with open(csv, "a") as f:
    f.write(f"{m},{lane},{over},{t_off:.4f},{t_on:.4f},{overhead:.3f},{step_ovh:.3f},{100*h:.2f},{100*h_pp:.2f},{gross:.3f},{net:.3f},{lane_ups:.4f},{c_ovh:.3f},{c_ups:.4g},{n_ovh:.3f},{n_ups:.4g}\n")
PY
  done
done
echo "gross: lane work's value (at the dedicated price) over the lanes-off training cost, as FreeRide reports"
echo "per task; net: minus the extra training time's cost. Prices: ${prices[*]:-equal (not given)}."
echo "overhead: training time vs the lanes-off run; step_ovh: the same for the median step time (robust to"
echo "one-off costs); harv_pp: harvest after the profile iterations (what a long run converges to)."
echo "lane units/s: lane work in dedicated one-core seconds per training second; colo/nice units/s: the"
echo "co-located process's own work units per second. CSV: $csv"
