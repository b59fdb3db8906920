#!/usr/bin/env bash
# What lanes cost training, cause by cause. The setting: a byte GPT (d_model 192, 4 layers), pp = 2,
# m = 4, 40 steps; the real lanes are pagerank (R-MAT scale 16, never converging) + prefill
# (500 requests/s). Each variant runs alternated with lanes-off runs (off, A, off, B, ..., for
# --rounds rounds), and each run's median step time (summary.json: step_ms_median, the first two
# steps excluded) is compared with the median of the lanes-off runs:
#   bookkeeping  the synthetic lane with step_us = 0: placed in every gap, doing nothing (what the
#                scheduler's prediction, polling and accounting cost)
#   time         the synthetic lane with the real lanes' median step, over 4 KiB: their time alone
#   memory       the same steps over a working set like pagerank's (--working-set-kb): their cache
#                and memory-bandwidth pressure on training's working set
#   real         pagerank + prefill
# The noise floor is the spread of the lanes-off runs (max - min over their median); a difference
# inside it is marked so. Next to each measured difference: what the lanes run estimated of its own
# cost without a lanes-off run (summary.json: lanes.total.estimated_overhead_fraction, overrun plus
# the interference its control gaps measured, +- its standard error; "-" where it had too few). The calibration before step 1 is outside every step time: its cost is
# the difference in wall time to step 1, printed apart. Hardware counters (LLC misses of training's
# thread) are used when `perf stat` can read them; on a machine that cannot (most VMs) it says so.
# A lanes run leaves one gap in --control-every empty (default 8, [lanes] control_every's default is
# 32): 40 steps then give each rank enough control gaps for an estimate. The lanes runs are
# measured with those gaps left empty too, so both figures are of the same runs.
#   scripts/bench/lane_cost.sh [--rounds 3] [--steps 40] [--working-set-kb 16384] [--control-every 8] [--csv FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 steps=40 working_set_kb=16384 control_every=8 csv=runs/bench-lane-cost.csv
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --working-set-kb) working_set_kb=$2; shift 2 ;;
    --control-every) control_every=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "lane_cost.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
build_targets="--target pipelane"  # the benchmark runs the program only
source scripts/bench/common.sh
mkdir -p "$(dirname "$csv")"

base=(--config configs/pp2.ini --train.steps="$steps" --train.warmup_steps=2 --train.global_batch=16 --train.eval_every=0
      --train.sample_every=0 --run.checkpoint_every=0 --run.resume=none --lanes.profile_iterations=2)
real_lanes=(--lanes.control_every="$control_every" --lanes.enabled=pagerank,prefill
            --lane.pagerank.generate=rmat --lane.pagerank.scale=16 --lane.pagerank.tolerance=0
            --lane.pagerank.max_iterations=1000000
            --lane.prefill.rate_per_s=500 --lane.prefill.requests=1000000)
synthetic() {
  echo "--lanes.control_every=$control_every --lanes.enabled=synthetic --lane.synthetic.step_us=$1 --lane.synthetic.working_set_kb=$2"
}

# run NAME ARGS...: one training run; $out/NAME.numbers gets its median step in ms, the seconds
# outside training's steps, the lanes' overrun and harvest, and its estimated overhead and
# standard error (nan when none).
run() {
  local name=$1 dir=$out/$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  timeout 900 mpirun --oversubscribe -np 2 build/pipelane train "${base[@]}" --run.dir="$dir" "$@" \
    >"$dir.log" 2>&1 || { echo "lane_cost.sh: run $name failed:" >&2; tail -n 5 "$dir.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 - "$dir" "$t0" "$t1" >"$dir.numbers" <<'EOF'
import json, sys
d, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
s = json.load(open(d + "/summary.json"))
lanes = (s.get("lanes") or {}).get("total") or {}
# Wall time outside training's steps: start-up, set-up and the lanes' calibration.
est = lanes.get("estimated_overhead_fraction")
est_err = lanes.get("estimated_overhead_fraction_stderr")
print(s["step_ms_median"], (t1 - t0) - s["train_seconds"], lanes.get("overrun_s", 0.0),
      lanes.get("harvest_fraction_after_profiling", 0.0), "nan" if est is None else est,
      "nan" if est_err is None else est_err)
EOF
}
numbers() { cat "$out/$1.numbers"; }

declare -A step before overrun harvest estimate estimate_err
variants=(bookkeeping time memory real)
lane_step_ms=""
for r in $(seq 1 "$rounds"); do
  for v in "${variants[@]}"; do
    run "off-$v-$r"
    read -r s b o h _ _ < <(numbers "off-$v-$r")
    step[off]+="$s " before[off]+="$b "
    case $v in
      bookkeeping) args=$(synthetic 0 4) ;;
      time) args=$(synthetic "${lane_step_us:?}" 4) ;;
      memory) args=$(synthetic "$lane_step_us" "$working_set_kb") ;;
      real) args="${real_lanes[*]}" ;;
    esac
    # The first round measures the real lanes first: their median step sizes the synthetic ones.
    if [ "$r" = 1 ] && [ -z "$lane_step_ms" ] && [ "$v" = bookkeeping ]; then
      run real-calibrate "${real_lanes[@]}"
      lane_step_ms=$(python3 - "$out/real-calibrate" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
steps = lanes_s = 0.0
for rank in s["lanes"]["per_rank"]:
    for lane in (rank or {}).get("lanes", {}).values():
        steps += lane.get("steps", 0) - lane.get("calibration_steps", 0)
        lanes_s += lane.get("lane_s", 0)
print(1e3 * lanes_s / steps if steps else 1.0)
EOF
)
      lane_step_us=$(python3 -c "print(max(1, round(1000 * $lane_step_ms)))")
      echo "real lanes' mean step: $lane_step_ms ms (the synthetic lanes' step_us = $lane_step_us)" >&2
    fi
    # shellcheck disable=SC2086
    run "$v-$r" $args
    read -r s b o h e ee < <(numbers "$v-$r")
    step[$v]+="$s " before[$v]+="$b " overrun[$v]+="$o " harvest[$v]+="$h " estimate[$v]+="$e " estimate_err[$v]+="$ee "
  done
done

counters="not readable here (perf stat: <not supported>; a VM without a PMU)"
if perf stat -e LLC-load-misses true 2>&1 | grep -q '^ *[0-9,]\+ *LLC-load-misses'; then
  counters="readable: rerun with PIPELANE_PERF=1 to record them (not wired into this table)"
fi

python3 - "$csv" "$rounds" "$counters" "${step[off]}" "${before[off]}" \
  "${step[bookkeeping]}" "${step[time]}" "${step[memory]}" "${step[real]}" \
  "${before[bookkeeping]}" "${before[time]}" "${before[memory]}" "${before[real]}" \
  "${overrun[real]}" "${harvest[real]}" "$steps" \
  "${estimate[bookkeeping]}" "${estimate[time]}" "${estimate[memory]}" "${estimate[real]}" \
  "${estimate_err[bookkeeping]}" "${estimate_err[time]}" "${estimate_err[memory]}" "${estimate_err[real]}" <<'EOF'
import math, statistics as st, sys
csv, rounds, counters = sys.argv[1], int(sys.argv[2]), sys.argv[3]
nums = lambda s: [float(x) for x in s.split()]
off, off_before = nums(sys.argv[4]), nums(sys.argv[5])
names = ["bookkeeping", "time", "memory", "real"]
variants = dict(zip(names, map(nums, sys.argv[6:10])))
befores = dict(zip(names, map(nums, sys.argv[10:14])))
overrun, harvest, steps = nums(sys.argv[14]), nums(sys.argv[15]), int(sys.argv[16])
estimates = dict(zip(names, map(nums, sys.argv[17:21])))
estimate_errs = dict(zip(names, map(nums, sys.argv[21:25])))
def estimated(name):
    # The run's own estimate (median over rounds; its standard error alongside), or "-".
    known = [(e, s) for e, s in zip(estimates[name], estimate_errs[name]) if not math.isnan(e)]
    if not known: return "-", None, None
    e = st.median(k[0] for k in known); s = st.median(k[1] for k in known)
    return f"{100 * e:+.1f}% +-{100 * s:.1f}%", e, s
m_off = st.median(off)
noise = (max(off) - min(off)) / m_off
print(f"\nlanes' cost to training by cause: pp 2, m 4, {steps} steps, {rounds} alternated rounds; "
      f"lanes off: median step {m_off:.2f} ms, noise floor {100 * noise:.1f}% (spread of {len(off)} lanes-off runs)")
print(f"{'variant':<12} {'median step ms':>14} {'vs off':>8} {'spread':>7} {'estimated':>14}  verdict")
rows = []
for name in names:
    v = variants[name]
    m = st.median(v)
    d = (m - m_off) / m_off
    spread = (max(v) - min(v)) / m
    verdict = "inside the noise" if abs(d) <= noise else ("slower" if d > 0 else "faster")
    text, e, s = estimated(name)
    print(f"{name:<12} {m:>14.2f} {100 * d:>+7.1f}% {100 * spread:>6.1f}% {text:>14}  {verdict}")
    rows.append((name, m, d, spread, verdict, "" if e is None else e, "" if s is None else s))
print(f"real lanes: overrun {st.median(overrun):.3f} s per run ({100 * st.median(overrun) / (steps * m_off / 1e3):.2f}% "
      f"of training), harvest after profiling {100 * st.median(harvest):.0f}%")
cal = st.median(befores["real"]) - st.median(off_before)
print(f"calibration and set-up before step 1: +{cal:.2f} s with the real lanes (outside every step time)")
print(f"hardware counters: {counters}")
with open(csv, "w") as f:
    f.write("variant,median_step_ms,vs_off,spread,verdict,estimated,estimated_stderr\n")
    f.write(f"off,{m_off},0,{noise},,,\n")
    for r in rows: f.write(",".join(str(x) for x in r) + "\n")
print(f"(CSV: {csv})")
EOF
