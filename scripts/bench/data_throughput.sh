#!/usr/bin/env bash
# Data pipeline throughput: `pipelane prepare-data --tokenizer gpt2` tokens/s on the Jargon File
# (both cores), the training loader's samples/s (seq_len 128, batch 8), to compare with the
# samples/s of `scripts/run.sh` (tokens/s of the summary / 128); and the two hostile inputs that
# used to hurt: seconds and peak memory for a 256 MiB gzip bomb (byte tokenizer: it streams) and
# for GPT-2 BPE on one 1 MB word.
#   scripts/bench/data_throughput.sh [BUILD_DIR=build] [BASELINE_BUILD_DIR]
# With a baseline build (e.g. of the commit before a change), every prepare-data row runs both,
# interleaved, so that both see the same load.
set -euo pipefail
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/../.."
build="${1:-build}"
baseline="${2:-}"
scripts/setup.sh
[ -x "$build/pipelane" ] || scripts/build.sh >/dev/null
cmake --build "$build" --target pipelane bench_loader >/dev/null
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
builds=("$build")
[ -n "$baseline" ] && builds+=("$baseline")
corpus=/usr/share/doc/jargon-text/jargon.txt.gz
tokenizer=gpt2
"$build/pipelane" prepare-data --tokenizer gpt2 --input "$corpus" --output "$out/j.h5" >/dev/null 2>&1 || tokenizer=byte

# "<seconds> s, peak <MiB> MiB, exit <code>" of a command (peak resident memory of the child).
measure() {
  python3 - "$@" <<'EOF'
import resource, subprocess, sys, time
start = time.monotonic()
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"{time.monotonic() - start:.2f} s, peak {peak:.0f} MiB, exit {code}")
EOF
}

echo "== prepare-data ($tokenizer tokenizer, Jargon File), 3 runs each"
for _ in 1 2 3; do
  for b in "${builds[@]}"; do
    printf '%-24s ' "$b:"
    "$b/pipelane" prepare-data --tokenizer "$tokenizer" --input "$corpus" --output "$out/j.h5" | tail -1
  done
done

echo "== gzip bomb: 256 MiB of zeros (~250 KiB compressed), byte tokenizer"
head -c $((256 << 20)) /dev/zero | gzip -9 >"$out/bomb.txt.gz"
for b in "${builds[@]}"; do
  printf '%-24s ' "$b:"
  measure "$b/pipelane" prepare-data --input "$out/bomb.txt.gz" --output "$out/bomb.h5" --documents whole-file
done

if [ "$tokenizer" = gpt2 ]; then
  echo "== GPT-2 BPE on one word of 1 MB (random lowercase letters)"
  python3 -c "import random; random.seed(1)
print(''.join(random.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(1 << 20)))" >"$out/word.txt"
  for b in "${builds[@]}"; do
    printf '%-24s ' "$b:"
    measure "$b/pipelane" prepare-data --tokenizer gpt2 --input "$out/word.txt" --output "$out/word.h5"
  done
fi

echo "== loader"
"$build/tests/datasets/bench_loader" "$out/j.h5" 128 8 2
