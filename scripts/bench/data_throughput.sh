#!/usr/bin/env bash
# Data pipeline throughput: `pipelane prepare-data --tokenizer gpt2` tokens/s on the Jargon File
# (both cores) and the training loader's samples/s (seq_len 128, batch 8), to compare with the
# samples/s of `scripts/run.sh` (tokens/s of the summary / 128).
#   scripts/bench/data_throughput.sh [BUILD_DIR=build]
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/../.."
build="${1:-build}"
scripts/setup.sh
[ -x "$build/pipelane" ] || scripts/build.sh >/dev/null
cmake --build "$build" --target pipelane bench_loader >/dev/null
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
corpus=/usr/share/doc/jargon-text/jargon.txt.gz
tokenizer=gpt2
"$build/pipelane" prepare-data --tokenizer gpt2 --input "$corpus" --output "$out/j.h5" >/dev/null 2>&1 || tokenizer=byte
echo "== prepare-data ($tokenizer tokenizer), best of 3"
for _ in 1 2 3; do
  "$build/pipelane" prepare-data --tokenizer "$tokenizer" --input "$corpus" --output "$out/j.h5" | tail -1
done
echo "== loader"
"$build/tests/datasets/bench_loader" "$out/j.h5" 128 8 2
