#!/usr/bin/env bash
# Text generation speed of `pipelane generate` (KV-cache decoding, model/gpt_decoder.h) for the
# tiny shape (configs/tiny.ini: 4 layers, d_model 128) and GPT-2 small (configs/gpt2-small.ini:
# 124M parameters), freshly initialised (speed does not depend on the weights): the time to the
# first token (the prompt's prefill) and the decoding tokens/s after it, for 256 tokens, with one
# thread and with every core (single-row decoding is memory-bound and synchronises threads at
# every matmul, so more threads help less than in training, and hurt on a busy machine).
#   scripts/bench/generate.sh [--tokens N] [--threads "1 2"]
set -euo pipefail
cd "$(dirname "$0")/../.."
tokens=256
threads="1 $(nproc)"
while [ $# -gt 0 ]; do
  case "$1" in
    --tokens) tokens=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "generate.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
scripts/setup.sh
scripts/build.sh >/dev/null
prompt="The Jargon File is a glossary of hacker slang."
printf '%-12s %10s %8s %14s %12s %10s\n' shape params threads "first token s" "tokens/s" "total s"
for cfg in configs/tiny.ini configs/gpt2-small.ini; do
 for t in $threads; do
  line=$(build/pipelane generate --config "$cfg" --prompt "$prompt" --tokens "$tokens" --threads "$t" \
           --seed 1 --json)
  /usr/bin/python3 - "$cfg" "$line" <<'PY'
import json, re, sys
cfg, j = sys.argv[1], json.loads(sys.argv[2])
text = open(cfg).read()
get = lambda k: int(re.search(r"^%s\s*=\s*(\d+)" % k, text, re.M).group(1))
L, C, V, T = get("layers"), get("d_model"), get("vocab_size"), get("seq_len")
params = 12 * L * C * C + (V + T) * C
name = cfg.split("/")[-1].replace(".ini", "")
print(f"{name:<12} {params/1e6:>9.1f}M {j['threads']:>8} {j['first_token_s']:>14.3f} {j['tokens_per_s']:>12.1f} {j['seconds']:>10.2f}")
PY
 done
done
