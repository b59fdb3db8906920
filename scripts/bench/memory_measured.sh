#!/usr/bin/env bash
# The memory features' effect, predicted and measured, on this machine: short `pipelane train` runs
# of configs/tiny.ini (0.8M parameters, 4 layers, micro_batch 8, global_batch 16) with each feature
# on and off - [train] recompute none / selective / full (one process, and pp 2 with 1F1B), [train]
# distributed_optimizer off / on at dp 2 and dp 4 (4 ranks oversubscribed), and [parallel]
# sequence_parallel off / on at tp 2 where this build has it (the dp runs: global_batch 32), and
# [train] storage fp32 / bf16 (with precision = bf16) in one process and at pp 2, and [train]
# gemm_weights = bf16 beside bf16 storage in one process, and fp32 / bf16 under the distributed
# optimizer at dp 4 (where bf16 shards the fp32 masters too). Per run, rank 0's prediction by
# category (`pipelane memory --json`, the memory model the executor sizes its arena with) beside
# the arena's high-water mark from summary.json, for the rank the prediction is of.
#   scripts/bench/memory_measured.sh [--steps N]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=2
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "memory_measured.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
build_targets="--target pipelane"
source scripts/bench/common.sh

base=(--config configs/tiny.ini --train.steps="$steps" --train.warmup_steps=0 --train.eval_every=0 --train.sample_every=0
      --run.checkpoint_every=0 --run.resume=none)
rows="$out/rows.txt"
: >"$rows"

# measure LABEL RANKS OPTIONS...: one run; a row with rank 0's predicted categories and its high water.
measure() {
  local label=$1 ranks=$2
  shift 2
  local dir="$out/run$(wc -l <"$rows")"
  local launch=(build/pipelane)
  [ "$ranks" -gt 1 ] && launch=(mpirun --oversubscribe -np "$ranks" build/pipelane)
  "${launch[@]}" train "${base[@]}" --run.dir="$dir" "$@" >"$dir.log" 2>&1 ||
    { echo "memory_measured.sh: $label failed:" >&2; tail -n 5 "$dir.log" >&2; exit 1; }
  build/pipelane memory "${base[@]}" "$@" --json >"$dir.memory.json"
  python3 - "$label" "$ranks" "$dir/summary.json" "$dir.memory.json" >>"$rows" <<'EOF'
import json, sys
label, ranks, summary, memory = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
measured = next(m for m in json.load(open(summary))["memory"] if m["rank"] == 0)
stage = next(s for s in json.load(open(memory))["stages"] if s["stage"] == measured["stage"])
mib = lambda b: b / 2**20
print("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %+.2f%% |" % (
    label, ranks, mib(stage["weights"] + stage["master_weights"] + stage["gradients"]), mib(stage["optimizer"]),
    mib(stage["activations"]), mib(stage["messages"] + stage["scratch"]), mib(stage["total"]),
    mib(measured["high_water_bytes"]),
    100 * (measured["high_water_bytes"] - stage["total"]) / stage["total"]))
EOF
  echo "  $label: done" >&2
}

for recompute in none selective full; do
  measure "recompute $recompute, one process" 1 --train.recompute=$recompute
done
for recompute in none selective full; do
  measure "recompute $recompute, pp 2 (1f1b)" 2 --parallel.pp=2 --train.recompute=$recompute
done
on_off() { [ "$1" = true ] && echo on || echo off; }  # the README's words for a switch
for dp in 2 4; do
  for zero in false true; do
    measure "distributed optimizer $(on_off $zero), dp $dp" "$dp" --parallel.dp=$dp --train.global_batch=32 \
      --train.distributed_optimizer=$zero
  done
done
# The help held in a variable: `grep -q` leaving a pipe early would fail the pipe under pipefail.
train_help=$(build/pipelane train --help 2>/dev/null || true)
if grep -q "sequence_parallel" <<< "$train_help"; then
  for sp in false true; do
    measure "sequence parallel $(on_off $sp), tp 2" 2 --parallel.tp=2 --parallel.sequence_parallel=$sp
  done
else
  echo "  (this build has no [parallel] sequence_parallel: no row for it)" >&2
fi
for ranks in 1 2; do
  for storage in fp32 bf16; do
    where="one process"
    [ "$ranks" = 2 ] && where="pp 2 (1f1b)"
    measure "storage $storage (precision bf16), $where" "$ranks" --parallel.pp="$ranks" --train.precision=bf16 \
      --train.storage=$storage
  done
done
measure "gemm_weights bf16 (storage bf16), one process" 1 --train.precision=bf16 --train.storage=bf16 \
  --train.gemm_weights=bf16
# Under the distributed optimizer bf16 GEMM weights shard the fp32 masters too.
for weights in fp32 bf16; do
  measure "gemm_weights $weights (storage bf16), distributed optimizer, dp 4" 4 --parallel.dp=4 \
    --train.global_batch=32 --train.distributed_optimizer=true --train.precision=bf16 --train.storage=bf16 \
    --train.gemm_weights=$weights
done

echo
echo "configs/tiny.ini, $steps steps; rank 0 (stage 0): the memory model's prediction by category (MiB) and the arena's high-water mark"
echo "| run | ranks | weights + gradients | optimizer | activations | messages + scratch | predicted | measured | measured - predicted |"
echo "|---|---|---|---|---|---|---|---|---|"
cat "$rows"
