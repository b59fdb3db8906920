#!/usr/bin/env bash
# Checks that tests/golden/gpt2_tiny.bin matches what make_gpt2_golden.py generates now.
# Needs Debian's /usr/bin/python3 with torch; skips (exit 0) when torch is not importable.
# Run by the optional ctest label `oracle` (ctest -L oracle).
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py=/usr/bin/python3
if [ ! -x "$py" ] || ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "skipped: torch not installed (needs $py with torch)"
  exit 0
fi
exec "$py" "$here/make_gpt2_golden.py" --check "$here/gpt2_tiny.bin"
