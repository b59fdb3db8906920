#!/usr/bin/env bash
# ATLAS's idea, training one model across data centres, SIMULATED with `pipelane simulate` (no GPUs
# here; scripts/bench/wan.sh measures the same transfers on an emulated WAN on this machine): a
# ~7B GPT (scripts/repro/models/gpt-7b.ini: pp 8, 1F1B, m 8, tp 1) on 2048 H100 in 4 sites joined by
# a WAN of 20 ms one way where one TCP connection gets 1 Gbit/s (configs/clusters/atlas-4-sites.ini),
# with lines of 100, 400 and 1600 Gbit/s between sites. Three ways to train:
#   naive DP     whole pipelines in each site, data parallelism across the WAN (the gradient
#                all-reduce crosses it every iteration), one connection per transfer
#   naive PP     pipeline stages across sites (2 a site), the replicas' transfers crossing a line
#                at once, one connection each ([wan] sharing = concurrent, connections = 1)
#   ATLAS        stages across sites, each transfer striped over enough connections to fill the
#                line, the replicas taking turns at it ([wan] sharing = temporal)
# then ATLAS with prefill as a service in its bubbles (an 8B model's 512-token prompts, 16.6 ms a
# request on an H100 at half its peak, as scripts/repro/bubbletea.sh), at a stated request rate.
# Prints iteration time, ATLAS's speedup over both baselines and GPU utilisation (training, and
# with prefill) next to the paper's "up to 17x" and "up to 94%"; writes scripts/repro/figures/atlas.png.
#   scripts/repro/atlas.sh [--iterations N] [--lines "100 400 1600"] [--rate REQUESTS_PER_S_PER_GPU]
iterations=20
lines="100 400 1600"
rate=64
while [ $# -gt 0 ]; do
  case "$1" in
    --iterations) iterations=$2; shift 2 ;;
    --lines) lines=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "atlas.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/common.sh"
model=scripts/repro/models/gpt-7b.ini
base=configs/clusters/atlas-4-sites.ini
per_connection_gbit=1  # the file's bandwidth_gbs (0.125 GB/s)

cat >"$work/prefill.jsonl" <<JSON
{"lane":"prefill","work_unit":"requests","step_ms_median":16.6,"requests_per_s":$rate,"memory_mb":20480,"dedicated_device":"h100","source":"stated: 8B model, 2 x 8e9 FLOPs a prompt token, 512-token prompts, H100 at 50% of peak"}
JSON
echo "ATLAS, simulated: ~7B GPT (pp 8, 1F1B, m 8, tp 1, dp 256) on 2048 H100 in 4 sites, WAN 20 ms one way,"
echo "1 Gbit/s a TCP connection; prefill lane: $rate requests/s per GPU of 16.6 ms each"
printf "%6s | %10s %10s %10s | %8s %8s | %8s %8s %9s\n" line naive_DP naive_PP ATLAS vs_DP vs_PP util util+pf "ttft_p50"
printf "%6s | %10s %10s %10s | %8s %8s | %8s %8s %9s\n" Gbit/s s/iter s/iter s/iter speedup speedup ATLAS ATLAS ms
: >"$work/atlas.dat"
for line in $lines; do
  connections=$((line / per_connection_gbit))
  cluster="$work/atlas-$line.ini"
  sed "s/^capacity_gbs = .*/capacity_gbs = $(python3 -c "print($line / 8)")/; s/^connections = .*/connections = $connections/" \
    "$base" >"$cluster"
  common=(--config $model --cluster "$cluster" --parallel.dp=256 --train.global_batch=2048 --iterations "$iterations"
          --trace-iterations 0)
  simulate "$work/dp-$line" "${common[@]}" --lanes none --wan.placement=replicas --wan.sharing=concurrent --wan.connections=1
  simulate "$work/pp-$line" "${common[@]}" --lanes none --wan.sharing=concurrent --wan.connections=1
  simulate "$work/atlas-$line" "${common[@]}" --lanes none --wan.sharing=temporal --wan.connections=$connections
  simulate "$work/prefill-$line" "${common[@]}" --lanes "$work/prefill.jsonl" --wan.sharing=temporal \
    --wan.connections=$connections
  python3 - "$work" "$line" "$connections" <<'PY'
import json, sys
work, line, connections = sys.argv[1:]
s = {k: json.load(open(f"{work}/{k}-{line}/summary.json")) for k in ("dp", "pp", "atlas", "prefill")}
t = {k: v["step_ms_median"] / 1e3 for k, v in s.items()}
util = s["atlas"]["simulation"]["utilisation_training_only"]
util_pf = s["prefill"]["simulation"]["utilisation_with_lanes"]
ttft = s["prefill"]["lanes"]["requests"]["ttft_p50_s"] * 1e3
print(f"{line:>6s} | {t['dp']:10.2f} {t['pp']:10.2f} {t['atlas']:10.2f} | {t['dp'] / t['atlas']:7.1f}x "
      f"{t['pp'] / t['atlas']:7.1f}x | {util:8.3f} {util_pf:8.3f} {ttft:9.1f}")
with open(f"{work}/atlas.dat", "a") as f:
    f.write(f"{line} {t['dp'] / t['atlas']} {t['pp'] / t['atlas']} {util} {util_pf}\n")
PY
done
cat <<'TXT'
(s/iter: simulated iteration time; speedup: naive / ATLAS iteration time; util: training compute
 over GPU time, util+pf: with the prefill lane's steps; ttft_p50: a prefill request's time from
 arrival to the end of its prefill. ATLAS+BubbleTea report training up to 17x faster than
 geo-distributed baselines and GPU utilisation up to 94% with prefill - their models, WANs and
 baselines, not these: the figures above come from this script's stated settings)
TXT
mkdir -p "$figures"
cat >"$work/atlas.gp" <<GP
set output '$figures/atlas.png'
set multiplot layout 1,2 title 'Simulated: ~7B GPT on 2048 H100 in 4 sites (WAN 20 ms, 1 Gbit/s a connection)'
set logscale x 2
set xlabel 'WAN line between two sites (Gbit/s)'
set key top left
set grid
set ylabel 'ATLAS speedup (naive / ATLAS iteration time)'
set logscale y
plot '$work/atlas.dat' using 1:2 with linespoints lw 2 title 'over naive DP across sites', \
     '' using 1:3 with linespoints lw 2 title 'over naive PP across sites', \
     17 with lines dt 3 lc rgb '#888888' title 'paper: up to 17x'
unset logscale y
set yrange [0:1]
set ylabel 'GPU utilisation (ATLAS)'
plot '$work/atlas.dat' using 1:4 with linespoints lw 2 title 'training only', \
     '' using 1:5 with linespoints lw 2 title 'with prefill in the bubbles', \
     0.94 with lines dt 3 lc rgb '#888888' title 'paper: up to 94%'
unset multiplot
GP
gnuplot -e "set terminal pngcairo noenhanced size 1100,450 font 'sans,10' background '#ffffff'" "$work/atlas.gp"
echo "wrote $figures/atlas.png"
