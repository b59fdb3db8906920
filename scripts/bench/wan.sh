#!/usr/bin/env bash
# Training across an emulated WAN (scripts/wan/emulate.sh), measured, next to the simulator:
# 2 sites joined by the cluster file's link (default configs/clusters/wan-emulated.ini: 20 ms
# round trip, 25 Mbit/s a TCP connection, 100 Mbit/s capacity), pp 2 across the sites, dp 2 inside
# each: 4 ranks on this machine's cores (OVERSUBSCRIBED on 2 cores: ranks time-share them, and the
# delay line and MPI's progress threads take their share too).
#   naive   one TCP connection per pair of ranks (--nics 1), the replicas sending at once
#           ([wan] sharing = concurrent, connections = 1)
#   atlas   N connections striping each message (--nics N) and temporal sharing (the replicas take
#           turns, each message with the link to itself: sharing = temporal, connections = N)
# each without and with a prefill lane in the bubbles. Per run: iteration time (summary.json
# step_ms_median), bubble, WAN utilisation (pipeline payload crossing the WAN per iteration, one
# direction, over iteration time x capacity), rank-time utilisation (training busy plus lane
# steps), prefill TTFT p50; then `pipelane simulate --profile RUN --cluster FILE` (the run's own
# compute times, the cluster file's link) and its predicted iteration time against the measured one,
# twice: with the cluster file's link as configured (sim_ms), and with the link as measured
# (sim_meas_link: the WAN link's per-connection bandwidth replaced by what build/wan_message_probe
# measures for one pipeline message over the emulated WAN with the variant's connections, both
# directions at once, every pair of ranks at once for concurrent sharing - the link calibrated as
# the compute times are, from a measurement).
#   scripts/bench/wan.sh [--cluster FILE] [--nics N] [--steps N] [--m MICROBATCHES] [--csv FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
cluster=configs/clusters/wan-emulated.ini
nics=4
steps=6
m=8
csv=runs/bench-wan.csv
while [ $# -gt 0 ]; do
  case "$1" in
    --cluster) cluster=$2; shift 2 ;;
    --nics) nics=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --m) m=$2; shift 2 ;;
    --csv) csv=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "wan.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "wan.sh: needs root (scripts/wan/emulate.sh makes network namespaces)" >&2; exit 2; }
scripts/setup.sh
if [ -f build/CMakeCache.txt ]; then cmake --build build --target pipelane wan_delay wan_message_probe >/dev/null
else scripts/build.sh >/dev/null; fi
[ -f data/jargon.h5 ] || build/pipelane prepare-data --input /usr/share/doc/jargon-text/jargon.txt.gz \
  --output data/jargon.h5 >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$(dirname "$csv")"

dp=2 micro_batch=4
job=(--config configs/pp2.ini --parallel.pp=2 --parallel.dp=$dp --train.micro_batch=$micro_batch
     --train.global_batch=$((dp * micro_batch * m)) --train.steps="$steps" --train.warmup_steps=1
     --train.eval_every=0 --train.threads=1 --wan.cluster="$cluster")
prefill=(--lanes.enabled=prefill --lanes.memory_mb=128 --lane.prefill.rate_per_s=200
         --lane.prefill.requests=1000000)

# The link as measured: one pipeline message (micro_batch x seq_len x d_model floats) both ways at
# once over the emulated WAN, per connection count - from one pair of ranks for temporal sharing
# (a turn has the link alone), from every pair at once for concurrent sharing (the pipelines send
# at once); a copy of the cluster file whose WAN link has the per-connection bandwidth that
# reproduces the median message time under the simulator's own pricing (wire time plus one
# latency, plus a round trip for a rendezvous message).
message_bytes=$(python3 -c "import configparser; c=configparser.ConfigParser(); c.read('configs/pp2.ini'); \
print($micro_batch * c.getint('model','seq_len') * c.getint('model','d_model') * 4)")
calibrate() {  # connections sharing -> writes $out/cluster-measured-N-SHARING.ini, prints the median ms
  local conns=$1 sharing=$2 probe pairs=()
  [ "$sharing" = concurrent ] && pairs=(--all-pairs)
  probe=$(scripts/wan/emulate.sh --cluster "$cluster" --nics "$conns" -- build/wan_message_probe \
    --bytes "$message_bytes" --rounds 14 "${pairs[@]}" 2>&1 | grep '^{"bytes"') ||
    { echo "wan.sh: the message probe failed over $conns connection(s)" >&2; exit 1; }
  python3 - "$cluster" "$conns" "$probe" "$out/cluster-measured-$conns-$sharing.ini" <<'PY'
import configparser, json, sys
src, conns, probe, dst = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
c = configparser.ConfigParser()
c.read(src)
links = {c[s]["link"] for s in c.sections() if s.startswith("between.")}
for name in links:
    l = c["link." + name]
    latency_s = float(l["latency_us"]) * 1e-6
    rendezvous = int(l.get("rendezvous_above_bytes", "0"))
    latencies = 3 if rendezvous and probe["bytes"] > rendezvous else 1
    wire_s = probe["median_ms"] / 1e3 - latencies * latency_s
    if wire_s <= 0:
        sys.exit(f"wan.sh: a {probe['bytes']}-byte message took {probe['median_ms']} ms, not more than its latencies")
    l["bandwidth_gbs"] = f"{probe['bytes'] / wire_s / conns / 1e9:.9f}"
    l["description"] = (l.get("description", name) + f" (per-connection bandwidth as measured: {probe['bytes']}-byte "
                        f"messages over {conns} connection(s), {probe['pairs']} pair(s) of ranks at once, took "
                        f"{probe['median_ms']:.1f} ms, median)")
with open(dst, "w") as f:
    c.write(f)
print(f"{probe['median_ms']:.1f}")
PY
}

echo "WAN bench: $(build/pipelane sites --cluster "$cluster" | sed -n 1p)"
build/pipelane sites --cluster "$cluster" | sed -n '2,$p'
echo "pp 2 across the sites x dp $dp inside, 1F1B, m = $m microbatches of $micro_batch x 128 tokens, $steps steps;"
echo "4 ranks on $(nproc) cores: OVERSUBSCRIBED (ranks, the delay line and MPI progress threads share the cores)"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
naive_ms=$(calibrate 1 concurrent)
echo "one ${message_bytes}-byte message, both ways at once, 1 connection, every pair of ranks at once: $naive_ms ms (median)"
atlas_ms=$(calibrate "$nics" temporal)
echo "one ${message_bytes}-byte message, both ways at once, $nics connections, one pair of ranks: $atlas_ms ms (median)"
echo
printf "%-14s %5s %10s %10s %7s %13s %7s %9s %9s %9s %10s %8s\n" variant conns iter_ms sim_ms sim/meas \
  sim_meas_link sim/meas bubble wan_util util ttft_p50 sim_util
echo "variant,connections,sharing,lanes,iteration_ms,simulated_ms,simulated_measured_link_ms,bubble,wan_utilisation,utilisation,ttft_ms_p50,simulated_utilisation" >"$csv"
for variant in naive atlas naive+prefill atlas+prefill; do
  case $variant in
    naive*) conns=1 sharing=concurrent ;;
    atlas*) conns=$nics sharing=temporal ;;
  esac
  lanes=()
  [[ $variant == *prefill ]] && lanes=("${prefill[@]}")
  dir="$out/$variant"
  scripts/wan/emulate.sh --cluster "$cluster" --nics "$conns" -- build/pipelane train "${job[@]}" "${lanes[@]}" \
    --wan.sharing=$sharing --wan.connections="$conns" --run.dir="$dir" >"$dir.log" 2>&1 ||
    { tail -5 "$dir.log"; echo "wan.sh: the $variant run failed (log above)" >&2; exit 1; }
  build/pipelane simulate --profile "$dir" --cluster "$cluster" --out "$dir-sim" --quiet --iterations 50
  build/pipelane simulate --profile "$dir" --cluster "$out/cluster-measured-$conns-$sharing.ini" --out "$dir-sim-measured" \
    --quiet --iterations 50
  /usr/bin/env python3 - "$dir" "$variant" "$conns" "$sharing" "$csv" "$(build/pipelane sites --cluster "$cluster" --shell)" <<'PY'
import configparser, json, statistics, sys
run, variant, conns, sharing, csv, layout = sys.argv[1:]
me = json.load(open(run + "/summary.json"))
si = json.load(open(run + "-sim/summary.json"))
sm = json.load(open(run + "-sim-measured/summary.json"))
cfg = configparser.ConfigParser()
cfg.read(run + "/config.ini")
link = [l.split() for l in layout.splitlines() if l.startswith("link ")][0]
capacity = float(link[6]) or float(link[4]) * int(link[5])  # bytes/s
mb, seq, d = (cfg.getint(s, k) for s, k in (("train", "micro_batch"), ("model", "seq_len"), ("model", "d_model")))
dp, m = me["parallel"]["dp"], me["parallel"]["microbatches"]
# One direction of the WAN per iteration: every replica's m activations (or gradients) of
# micro_batch x seq_len x d_model floats.
payload = dp * m * mb * seq * d * 4
it, it_sim, it_sm = me["step_ms_median"], si["step_ms_median"], sm["step_ms_median"]
def utilisation(s):
    b = s["bubble_fraction_measured"]
    lanes = s.get("lanes") or {}
    h = lanes.get("total", {}).get("harvest_fraction_after_profiling", 0.0) if lanes else 0.0
    return (1 - b) + b * h
ttft = [r["lanes"]["prefill"]["report"].get("ttft_ms_p50") for r in (me.get("lanes") or {}).get("per_rank", [])
        if "prefill" in r.get("lanes", {})]
ttft = [t for t in ttft if t is not None]
ttft_p50 = statistics.median(ttft) if ttft else float("nan")
wan_util = payload / (it / 1e3 * capacity)
u, u_sim = utilisation(me), utilisation(si)
print(f"{variant:14s} {conns:>5s} {it:10.1f} {it_sim:10.1f} {it_sim / it:8.2f} {it_sm:13.1f} {it_sm / it:8.2f} "
      f"{me['bubble_fraction_measured']:9.3f} {wan_util:9.3f} {u:9.3f} {ttft_p50:10.1f} {u_sim:8.3f}")
with open(csv, "a") as f:
    f.write(f"{variant},{conns},{sharing},{'prefill' if 'prefill' in variant else 'none'},{it},{it_sim},{it_sm},"
            f"{me['bubble_fraction_measured']},{wan_util},{u},{ttft_p50},{u_sim}\n")
PY
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$csv" <<'PY'
import csv, sys
rows = {r["variant"]: r for r in csv.DictReader(open(sys.argv[1]))}
n, a = rows["naive"], rows["atlas"]
me = float(n["iteration_ms"]) / float(a["iteration_ms"])
si = float(n["simulated_ms"]) / float(a["simulated_ms"])
print(f"naive / atlas iteration time: measured {me:.2f}x, simulated {si:.2f}x")
for v in ("naive", "atlas"):
    for key, what in (("simulated_ms", "link as configured"), ("simulated_measured_link_ms", "link as measured")):
        err = float(rows[v][key]) / float(rows[v]["iteration_ms"]) - 1
        print(f"simulator vs measured, {v}, {what}: {100 * err:+.1f}% "
              f"({'within' if abs(err) <= 0.15 else 'NOT within'} the 15% target)")
PY
echo "(wan_util: pipeline payload one way per iteration / (iteration time x link capacity); util: training"
echo " busy + lane steps over rank time after the profile iterations; ttft_p50: prefill requests' time to"
echo " first token, median over ranks; sim/meas: simulated / measured iteration time; sim_meas_link: simulated"
echo " with the WAN link's per-connection bandwidth as measured by the message probe above)"
echo "csv: $csv"
