#!/usr/bin/env bash
# Configures (once) and builds pipelane into build/ (Release, Ninja when present).
#   scripts/build.sh                      everything: the program, its CUDA library, every test
#   scripts/build.sh --target pipelane    only what that target needs (repeatable)
# Other arguments go to CMake's first configure (e.g. -DPIPELANE_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=() configure=()
while [ $# -gt 0 ]; do
  case $1 in
    --target) targets+=(--target "${2:?--target needs a name}"); shift 2 ;;
    *) configure+=("$1"); shift ;;
  esac
done
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${configure[@]}" >build-configure.log 2>&1 ||
    { cat build-configure.log; exit 1; }
  rm -f build-configure.log
fi
cmake --build build --parallel "$(nproc)" "${targets[@]}"
