#!/usr/bin/env bash
# Training across the emulated WAN (scripts/wan/emulate.sh: 2 sites, 20 ms round trip) gives the
# losses of the same job on one site bit for bit: pp 2 across the sites, dp 2 inside each, with
# temporal sharing over 2 connections and with concurrent sharing over 1. Placement, turns and
# striping change when bytes move, never which bytes. Exit 77 (ctest: skipped) where network
# namespaces cannot be made.
#   tests/wan/check_emulated_losses.sh [BUILD_DIR]
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$repo/build}"
export PIPELANE="$build/pipelane" WAN_DELAY="$build/wan_delay"
cluster="$repo/configs/clusters/wan-emulated.ini"
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 40 documents (blank-line separated), so that the validation split gets some.
for i in $(seq 40); do
  for _ in 1 2 3 4 5; do echo "pipeline bubbles are idle time; lanes fill them with useful work $i."; done
  echo
done >"$work/corpus.txt"
"$PIPELANE" prepare-data --input "$work/corpus.txt" --output "$work/corpus.h5" >/dev/null || fail "prepare-data"
job=(train --model.layers=4 --model.d_model=32 --model.heads=4 --model.seq_len=16 --model.vocab_size=256
     --train.micro_batch=2 --train.global_batch=16 --train.steps=4 --train.warmup_steps=1 --train.eval_every=0
     --train.threads=1 --train.seed=7 --parallel.pp=2 --parallel.dp=2 --data.path="$work/corpus.h5"
     --data.tokenizer=byte --run.log_every=1)
losses() { grep -o '"loss":[^,}]*' "$1/metrics.jsonl"; }

OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 \
  mpirun --oversubscribe -np 4 "$PIPELANE" "${job[@]}" --run.dir="$work/one-site" >"$work/one-site.log" 2>&1 ||
  { tail -5 "$work/one-site.log"; fail "the single-site run failed"; }
[ "$(losses "$work/one-site" | wc -l)" -eq 4 ] || fail "the single-site run logged no 4 losses"

for variant in "temporal 2" "concurrent 1"; do
  read -r sharing nics <<<"$variant"
  dir="$work/wan-$sharing"
  timeout 180 "$repo/scripts/wan/emulate.sh" --cluster "$cluster" --nics "$nics" -- "$PIPELANE" "${job[@]}" \
    --wan.cluster="$cluster" --wan.sharing="$sharing" --wan.connections="$nics" --run.dir="$dir" >"$dir.log" 2>&1
  status=$?
  [ $status -eq 77 ] && { echo "skipped: network namespaces cannot be made here"; exit 77; }
  [ $status -eq 0 ] || { tail -5 "$dir.log"; fail "the emulated WAN run ($sharing, $nics connection(s)) exited $status"; }
  grep -q "sites: east: stage 0 (ranks 0-1); west: stage 1 (ranks 2-3); cross-site transfers: $sharing" "$dir.log" ||
    fail "the $sharing run did not place stage 0 and stage 1 on different sites"
  if ! diff <(losses "$work/one-site") <(losses "$dir") >"$work/diff"; then
    cat "$work/diff"
    fail "losses across the emulated WAN ($sharing, $nics connection(s)) differ from the single-site run"
  fi
  echo "ok: $sharing sharing, $nics connection(s): 4 losses bit-identical to the single-site run"
done
