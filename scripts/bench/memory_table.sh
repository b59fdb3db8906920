#!/usr/bin/env bash
# The README's memory table: the memory model's prediction (pipelane memory) for GPT-2 XL 1.5B
# (pp 8) and Llama 3 8B (tp 8) on 8 GPUs of 80 GB, micro_batch 1, with [train] recompute none /
# selective / full, in pipelane's fp32 layout, with [train] storage = bf16 (what pipelane stores in
# bf16: activations and messages; weights and gradients fp32) and the whole layout at 16 bits,
# beside Korthikanti et al.'s per-layer formula (16-bit). Predictions only: nothing is allocated.
#   scripts/bench/memory_table.sh            (needs build/pipelane)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x build/pipelane ] || scripts/build.sh pipelane >/dev/null
row() {  # model label, config, grid options
  local label=$1 config=$2; shift 2
  for recompute in none selective full; do
    for storage in fp32 bf16 16bit; do
      local as=(--storage "$storage") name=$storage
      [ "$storage" = bf16 ] && as=(--storage fp32 --train.precision=bf16 --train.storage=bf16) name="bf16 activations"
      build/pipelane memory --config "$config" "$@" --train.recompute=$recompute "${as[@]}" \
          --device-memory-gb 80 | awk -v label="$label" -v rc=$recompute -v st="$name" '
        /^ +[0-9]+ / { if ($11 + 0 > most) { most = $11 + 0; states = $4 + $5 + $6 + $7; act = $8 } }
        /largest rank/ { fits = $NF == "fits" ? "yes" : "no" }
        /one layer.s activations/ {
          match($0, /: [0-9.]+ MiB in this layout/); here = substr($0, RSTART + 2, RLENGTH - 2); sub(/ MiB.*/, "", here)
          match($0, /Korthikanti[^:]*: [0-9.]+/); k = substr($0, RSTART, RLENGTH); sub(/.*: /, "", k)
        }
        END { printf "| %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %s |\n", label, rc, st, here, k, states, act, most, fits }'
    done
  done
}
echo "| model, grid | recompute | storage | one layer, one microbatch: pipelane (MiB) | Korthikanti, 16-bit (MiB) | model states, largest rank (GiB) | activations, largest rank (GiB) | largest rank in all (GiB) | fits 80 GB |"
echo "|---|---|---|---|---|---|---|---|---|"
row "GPT-2 XL 1.5B, pp 8 (1f1b, m 8)" configs/gpt2-xl.ini --parallel.tp=1 --parallel.pp=8 --train.global_batch=8
row "Llama 3 8B, tp 8 (m 8)" configs/llama3-8b.ini --parallel.tp=8 --parallel.pp=1 --train.global_batch=8
