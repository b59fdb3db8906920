#!/usr/bin/env bash
# Training throughput of pipelane vs PyTorch (Debian's python3-torch, CPU) on the same GPT-2:
# 4 layers, d_model 256, 4 heads, T 256, B 8, vocab 50304 (configs/bench-throughput.ini), same
# thread count, denormals flushed on both sides. MFU on both sides is against the same peak: the
# one pipelane's summary names (the hardware's, trainer/machine_peak.h). Prints one table; medians
# over timed steps.
#   scripts/bench/train_throughput.sh [--threads N] [--steps N]
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=$(nproc)
steps=12
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "train_throughput.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
scripts/setup.sh --reference
scripts/build.sh >/dev/null
[ -f data/jargon.h5 ] || build/pipelane prepare-data --input /usr/share/doc/jargon-text/jargon.txt.gz \
  --output data/jargon.h5 >/dev/null

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "pipelane: training configs/bench-throughput.ini ($steps steps, $threads threads)..."
build/pipelane train --config configs/bench-throughput.ini --train.steps="$steps" \
  --train.threads="$threads" --run.dir="$out/pipelane" >"$out/pipelane.log" 2>&1 ||
  { cat "$out/pipelane.log"; exit 1; }
read -r pl_tps pl_ms pl_mfu peak < <(/usr/bin/python3 - "$out/pipelane/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(s["tokens_per_s"], s["step_ms_median"], s["mfu"], s["peak_gflops"])
PY
)
echo "pytorch: same model, same threads..."
/usr/bin/python3 scripts/bench/torch_gpt2_throughput.py --threads "$threads" --steps "$steps" \
  --peak-gflops "$peak" --json 2>/dev/null | tail -n 1 >"$out/torch.json"

/usr/bin/python3 - "$pl_tps" "$pl_ms" "$pl_mfu" "$peak" "$out/torch.json" "$threads" <<'PY'
import json, sys
pl_tps, pl_ms, pl_mfu, peak = map(float, sys.argv[1:5])
t = json.load(open(sys.argv[5]))
print()
print(f"GPT-2 4L d256 T256 B8 V50304, {sys.argv[6]} threads, peak {peak:.0f} GFLOP/s")
print(f"{'impl':<10}{'tokens/s':>12}{'step ms':>12}{'MFU':>8}")
print(f"{'pipelane':<10}{pl_tps:>12.0f}{pl_ms:>12.0f}{100*pl_mfu:>7.1f}%")
print(f"{'pytorch':<10}{t['tokens_per_s']:>12.0f}{t['step_ms_median']:>12.0f}{100*t['mfu']:>7.1f}%")
print(f"ratio pipelane / pytorch tokens/s: {pl_tps / t['tokens_per_s']:.2f}x "
      f"(target >= 2x); pipelane MFU {100*pl_mfu:.0f}% (target >= 50%)")
PY
