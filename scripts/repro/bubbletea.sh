#!/usr/bin/env bash
# BubbleTea's idea, prefill as a service in training bubbles, SIMULATED with `pipelane simulate`
# (no GPUs here; nothing is measured): a ~7B GPT (scripts/repro/models/gpt-7b.ini: pp 8, 1F1B, m 8)
# trains on H100s (one replica per 8 GPUs) while the bubbles serve the prefill of an 8B model's
# requests (512-token prompts: 2 x 8e9 x 512 FLOPs = 16.6 ms on an H100 at half its peak, or 128-token
# prompts: 4.15 ms; 20 GiB of weights and cache), arriving as a Poisson process at a stated rate per GPU. Two clusters: one node of 8 H100, and BubbleTea's
# geo-distributed case, 2 sites x 4 nodes x 8 H100 joined by a WAN (configs/clusters/two-sites-wan.ini,
# dp 8), where the pipeline's cut between the sites makes long bubbles. Prints GPU utilisation
# (compute / device time) without and with prefill, requests served, time to first token p50/p99
# (from arrival until its prefill ends: decode runs elsewhere), next to the paper's "up to 94%".
# Writes scripts/repro/figures/bubbletea_utilisation.png.
#   scripts/repro/bubbletea.sh [--iterations N] [--rates "1 4 16 64"]
iterations=20
rates="1 4 16 64"
while [ $# -gt 0 ]; do
  case "$1" in
    --iterations) iterations=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bubbletea.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/common.sh"
model=scripts/repro/models/gpt-7b.ini

echo "BubbleTea, simulated: ~7B GPT training (pp 8, 1F1B, m 8) + 8B-model prefill (16.6 ms) in its bubbles"
printf "%-27s %6s %5s | %8s %8s %9s | %8s %8s %8s %9s\n" cluster req/s/GPU GPUs util_off util_on overhead \
  served unserved ttft_p50 ttft_p99
: >"$work/util.dat"
# label | cluster | dp | global batch (m = 8 microbatches per replica either way) | prefill step (ms)
for setting in "1 node, 512-token prompts|configs/clusters/dgx-h100-10k.ini|1|8|16.6" \
               "1 node, 128-token prompts|configs/clusters/dgx-h100-10k.ini|1|8|4.15" \
               "2 sites (WAN), 512-token|configs/clusters/two-sites-wan.ini|8|64|16.6"; do
  IFS='|' read -r label cluster dp batch step <<<"$setting"
  for rate in $rates; do
    cat >"$work/prefill.jsonl" <<JSON
{"lane":"prefill","work_unit":"requests","step_ms_median":$step,"requests_per_s":$rate,"memory_mb":20480,"dedicated_device":"h100","source":"stated: 8B model, 2 x 8e9 FLOPs a prompt token, H100 at 50% of peak"}
JSON
    out="$work/$dp-$rate"
    simulate "$out" --config $model --cluster "$cluster" --lanes "$work/prefill.jsonl" --iterations "$iterations" \
      --trace-iterations 0 --parallel.dp="$dp" --train.global_batch="$batch"
    python3 - "$out/summary.json" "$label" "$rate" "$work/util.dat" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
label, rate, dat = sys.argv[2:]
sim, lanes = s["simulation"], s["lanes"]
r = lanes["requests"]
print(f'{label:27s} {rate:>6s} {sim["world"]:5d} | {sim["utilisation_training_only"]:8.3f} '
      f'{sim["utilisation_with_lanes"]:8.3f} {100 * lanes["total"]["overhead"]["fraction"]:8.3f}% | '
      f'{r["served"]:8d} {r["unserved"]:8d} {1e3 * r["ttft_p50_s"]:7.0f}ms {1e3 * r["ttft_p99_s"]:8.0f}ms')
with open(dat, "a") as f:
    f.write(f'"{label}" {rate} {sim["utilisation_training_only"]} {sim["utilisation_with_lanes"]}\n')
PY
  done
done
cat <<'TXT'
(utilisation: training compute, plus prefill steps, over every GPU's time after the first iteration;
 served/unserved: one replica's requests over the run (unserved ones were still waiting for a bubble
 at the end); BubbleTea reports GPU utilisation up to 94% with ATLAS on geo-distributed training -
 its own models, traces and clusters, not these)
TXT
mkdir -p "$figures"
grep '^"1 node, 512' "$work/util.dat" >"$work/one.dat" || true
grep '^"1 node, 128' "$work/util.dat" >"$work/short.dat" || true
grep '^"2 sites' "$work/util.dat" >"$work/two.dat" || true
cat >"$work/util.gp" <<GP
set output '$figures/bubbletea_utilisation.png'
set title 'Simulated: GPU utilisation with prefill in the bubbles (~7B GPT training, 8B prefill)'
set xlabel 'prefill requests per second per GPU'
set ylabel 'GPU utilisation'
set logscale x 2
set yrange [0:1]
set key below
set grid
plot '$work/one.dat' using 2:3 with lines lw 2 dt 2 lc 1 title '1 node, training only', \
     '' using 2:4 with linespoints lw 2 lc 1 title '1 node, prefill of 512-token prompts', \
     '$work/short.dat' using 2:4 with linespoints lw 2 lc 2 title '1 node, prefill of 128-token prompts', \
     '$work/two.dat' using 2:3 with lines lw 2 dt 2 lc 3 title '2 sites (WAN), training only', \
     '' using 2:4 with linespoints lw 2 lc 3 title '2 sites (WAN), prefill of 512-token prompts', \
     0.94 with lines dt 3 lc rgb '#888888' title 'BubbleTea: up to 94%'
GP
plot "$work/util.gp"
echo "wrote $figures/bubbletea_utilisation.png"
