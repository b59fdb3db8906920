#!/usr/bin/env bash
# Configures (once) and builds pipelane into build/ (Release, Ninja when present).
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@" >build-configure.log 2>&1 ||
    { cat build-configure.log; exit 1; }
  rm -f build-configure.log
fi
cmake --build build --parallel "$(nproc)"
