#!/usr/bin/env bash
# Checks that a committed golden file matches what its script generates now: gpt2_tiny.bin
# (make_gpt2_golden.py; the default) or, with the argument `llama`, llama_tiny.bin
# (make_llama_golden.py), or with `cnn` the CNN lanes' cnn_*.bin (make_cnn_golden.py). Needs Debian's /usr/bin/python3 with torch; skips (exit 0) when torch
# is not importable. Run by the optional ctest label `oracle` (ctest -L oracle).
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py=/usr/bin/python3
model="${1:-gpt2}"
if [ ! -x "$py" ] || ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "skipped: torch not installed (needs $py with torch)"
  exit 0
fi
if [ "$model" = cnn ]; then exec "$py" "$here/make_cnn_golden.py" --check "$here"; fi
exec "$py" "$here/make_${model}_golden.py" --check "$here/${model}_tiny.bin"
