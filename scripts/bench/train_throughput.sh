#!/usr/bin/env bash
# Training throughput of pipelane vs PyTorch (Debian's python3-torch, CPU) on the same GPT-2, same
# thread count, denormals flushed on both sides. The peer is the fast, straightforward model a
# PyTorch user would write (scripts/bench/torch_gpt2_idiomatic.py); the clarity-first golden
# model (tests/golden/gpt2_reference.py) is shown too, labelled as what it is. The three run in
# turn, --rounds times; medians over rounds (each a median over timed steps), with the spread.
#   scripts/bench/train_throughput.sh [--threads N] [--steps N] [--rounds N] [--shape bench|gpt2-small]
#                                     [--arch gpt2|llama] [--precision fp32|bf16]
#     --precision bf16    pipelane fp32, bf16 ([train] precision), bf16 with bf16 activation
#                         storage ([train] storage) and that with a bf16 copy of the GEMMs'
#                         weights ([train] gemm_weights) against the idiomatic PyTorch model in
#                         fp32 and under CPU bf16 autocast, in one table (no golden model)
#     --arch llama        the same shape as a Llama: RMSNorm, RoPE, SwiGLU (Meta's width rule),
#                         kv_heads = heads / 2, untied head, no biases; the peer is
#                         scripts/bench/torch_llama_idiomatic.py
#     --shape bench       4 layers, d_model 256, 4 heads, T 256, B 8, vocab 50304 (default;
#                         configs/bench-throughput.ini)
#     --shape gpt2-small  GPT-2 124M: 12 layers, d_model 768, 12 heads, T 256, B 4, vocab 50304
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=$(nproc)
steps=8
rounds=3
shape=bench
arch=gpt2
precision=fp32
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "train_throughput.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$shape" in
  bench) model=(--model.layers=4 --model.d_model=256 --model.heads=4 --model.seq_len=256 --train.micro_batch=8 --train.global_batch=8)
         torch_model=(--layers 4 --d-model 256 --heads 4 --seq-len 256 --batch 8) ;;
  gpt2-small) model=(--model.layers=12 --model.d_model=768 --model.heads=12 --model.seq_len=256 --train.micro_batch=4 --train.global_batch=4)
              torch_model=(--layers 12 --d-model 768 --heads 12 --seq-len 256 --batch 4) ;;
  *) echo "train_throughput.sh: --shape is bench or gpt2-small, not '$shape'" >&2; exit 2 ;;
esac
case "$arch" in
  gpt2) ;;
  llama) heads=$(printf '%s\n' "${model[@]}" | sed -n 's/^--model.heads=//p')
         model+=(--model.arch=llama --model.kv_heads=$((heads / 2)) --model.rope_theta=10000)
         torch_model+=(--arch llama --kv-heads $((heads / 2))) ;;
  *) echo "train_throughput.sh: --arch is gpt2 or llama, not '$arch'" >&2; exit 2 ;;
esac
case "$precision" in
  fp32|bf16) ;;
  *) echo "train_throughput.sh: --precision is fp32 or bf16, not '$precision'" >&2; exit 2 ;;
esac
setup_flags=--reference
source scripts/bench/common.sh
if [ "$precision" = bf16 ]; then
  # Alternating rounds of six: pipelane fp32, bf16, bf16 with bf16 storage and that with bf16 GEMM
  # weights, PyTorch fp32 and bf16 autocast.
  for round in $(seq 1 "$rounds"); do
    echo "round $round/$rounds: pipelane fp32, bf16, bf16 storage, bf16 storage + weights, pytorch fp32, pytorch bf16 autocast..."
    for p in fp32 bf16 bf16storage bf16weights; do
      case $p in
        fp32) flags=(--train.precision=fp32) ;;
        bf16) flags=(--train.precision=bf16) ;;
        bf16storage) flags=(--train.precision=bf16 --train.storage=bf16) ;;
        bf16weights) flags=(--train.precision=bf16 --train.storage=bf16 --train.gemm_weights=bf16) ;;
      esac
      build/pipelane train --config configs/bench-throughput.ini "${model[@]}" --train.steps=$((steps + 2)) \
        --train.threads="$threads" "${flags[@]}" \
        --run.dir="$out/pipelane-$p$round" \
        >"$out/pipelane-$p$round.log" 2>&1 || { cat "$out/pipelane-$p$round.log"; exit 1; }
      sed -n 's/.*rank 0: \(.*\), peak .*/\1/p' "$out/pipelane-$p$round.log" | head -n 1 >"$out/backend-$p"
    done
    peak=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_gflops'])" \
           "$out/pipelane-fp32$round/summary.json")
    for p in fp32 bf16; do
      /usr/bin/python3 scripts/bench/torch_gpt2_throughput.py --model idiomatic "${torch_model[@]}" \
        --threads "$threads" --steps "$steps" --peak-gflops "$peak" --precision $p --json 2>/dev/null |
        tail -n 1 >"$out/torch-$p$round.json"
    done
  done
  /usr/bin/python3 - "$out" "$rounds" "$threads" "$shape $arch" <<'PY'
import json, statistics, sys
out, rounds, threads, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
files = {"pipelane fp32": "pipelane-fp32{}/summary.json", "pipelane bf16": "pipelane-bf16{}/summary.json",
         "pipelane bf16 storage": "pipelane-bf16storage{}/summary.json",
         "pipelane bf16 st.+weights": "pipelane-bf16weights{}/summary.json",
         "pytorch fp32": "torch-fp32{}.json", "pytorch bf16 autocast": "torch-bf16{}.json"}
print()
for p in ("fp32", "bf16"):
    try:
        print(f"pipelane {p} backend: " + open(f"{out}/backend-{p}").read().strip())
    except OSError:
        pass
print(f"shape {shape}, {threads} threads, {rounds} rounds (alternating); median over rounds [min, max]")
print(f"{'impl':<24}{'tokens/s':>10}  {'spread':<18}{'step ms':>9}")
med = {}
for key, pattern in files.items():
    vals = [json.load(open(f"{out}/" + pattern.format(r))) for r in range(1, rounds + 1)]
    tps = [v["tokens_per_s"] for v in vals]
    med[key] = statistics.median(tps)
    print(f"{key:<24}{med[key]:>10.0f}  [{min(tps):.0f}, {max(tps):.0f}]".ljust(52) +
          f"{statistics.median(v['step_ms_median'] for v in vals):>9.0f}")
# Also per round: the runs of a round are minutes apart, so on a machine whose load drifts their
# ratio is steadier than the ratio of medians taken over different rounds.
per_round = {k: [json.load(open(f"{out}/" + p.format(r)))["tokens_per_s"] for r in range(1, rounds + 1)]
             for k, p in files.items()}
def ratio(a, b):
    both = [x / y for x, y in zip(per_round[a], per_round[b])]
    return (f"{med[a] / med[b]:.2f}x   per round: median {statistics.median(both):.2f}x "
            f"[{min(both):.2f}, {max(both):.2f}]")
print(f"pipelane bf16 / pipelane fp32:          {ratio('pipelane bf16', 'pipelane fp32')}")
print(f"pytorch bf16 / pytorch fp32:            {ratio('pytorch bf16 autocast', 'pytorch fp32')}")
print(f"pipelane bf16 / pytorch bf16 autocast:  {ratio('pipelane bf16', 'pytorch bf16 autocast')}  <- the comparison")
print(f"pipelane bf16 storage / pipelane bf16:  {ratio('pipelane bf16 storage', 'pipelane bf16')}  (its casts' cost)")
print(f"bf16 GEMM weights / bf16 storage:       {ratio('pipelane bf16 st.+weights', 'pipelane bf16 storage')}"
      "  (one rounding a step, not one per GEMM)")
PY
  exit 0
fi
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: pipelane, pytorch (idiomatic), pytorch (golden reference model)..."
  build/pipelane train --config configs/bench-throughput.ini "${model[@]}" --train.steps=$((steps + 2)) \
    --train.threads="$threads" --run.dir="$out/pipelane$round" >"$out/pipelane$round.log" 2>&1 ||
    { cat "$out/pipelane$round.log"; exit 1; }
  peak=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['peak_gflops'])" \
         "$out/pipelane$round/summary.json")
  for m in idiomatic reference; do
    /usr/bin/python3 scripts/bench/torch_gpt2_throughput.py --model $m "${torch_model[@]}" --threads "$threads" \
      --steps "$steps" --peak-gflops "$peak" --json 2>/dev/null | tail -n 1 >"$out/torch-$m$round.json"
  done
done

/usr/bin/python3 - "$out" "$rounds" "$threads" "$shape $arch" <<'PY'
import json, statistics, sys
out, rounds, threads, shape = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {"pipelane": [], "pytorch (idiomatic)": [], "pytorch (golden ref.)": []}
for r in range(1, rounds + 1):
    s = json.load(open(f"{out}/pipelane{r}/summary.json"))
    rows["pipelane"].append((s["tokens_per_s"], s["step_ms_median"]))
    for key, m in (("pytorch (idiomatic)", "idiomatic"), ("pytorch (golden ref.)", "reference")):
        t = json.load(open(f"{out}/torch-{m}{r}.json"))
        rows[key].append((t["tokens_per_s"], t["step_ms_median"]))
print()
print(f"shape {shape}, {threads} threads, {rounds} rounds (alternating); median over rounds [min, max]")
print(f"{'impl':<24}{'tokens/s':>10}  {'spread':<18}{'step ms':>9}")
med = {}
for key, vals in rows.items():
    tps = [v[0] for v in vals]
    med[key] = statistics.median(tps)
    print(f"{key:<24}{med[key]:>10.0f}  [{min(tps):.0f}, {max(tps):.0f}]".ljust(52) +
          f"{statistics.median(v[1] for v in vals):>9.0f}")
print(f"pipelane / pytorch (idiomatic):    {med['pipelane'] / med['pytorch (idiomatic)']:.2f}x  <- the comparison")
print(f"pipelane / pytorch (golden ref.):  {med['pipelane'] / med['pytorch (golden ref.)']:.2f}x  "
      "(clarity-first model, not what a PyTorch user runs)")
PY
