#!/usr/bin/env bash
# The GPU check (L3 of runtime/cuda/README.md) from a build on this machine, for a machine that
# has the Debian packages of scripts/setup.sh and nvcc: builds the check's targets, then runs the
# two commands of scripts/gpu/ against the build folder, each writing $OUT/<command>/report.json
# and gpu.log. On a lent GPU machine, which may have none of those packages, use the bundle
# instead (scripts/gpu_bundle.sh here, then the two commands it prints: scripts/gpu/README.md).
#   scripts/gpu_check.sh               OUT defaults to ./gpu_check_out; the build goes to build-gpu/
#   GPU_CHECK_ARCH=90                  CUDA architectures to build (default 90: an H100/H200)
# Exit code: 0 when no stage failed or errored.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${GPU_CHECK_BUILD_DIR:-$root/build-gpu}
out=${OUT:-$root/gpu_check_out}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
timeout 300 cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPIPELANE_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=${GPU_CHECK_ARCH:-90}" -DPIPELANE_CUDA_WERROR=OFF || { echo "gpu_check: configure failed" >&2; exit 1; }
timeout "${GPU_CHECK_BUILD_TIMEOUT:-3600}" cmake --build "$build" --parallel "$(nproc)" \
  --target pipelane pipelane_cuda test_backend_ops test_cuda_gpu gpu_check_tool || { echo "gpu_check: build failed" >&2; exit 1; }
# The commands expect the bundle's flat bin/ folder.
bin=$(mktemp -d /tmp/pipelane-gpu-check-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
for f in pipelane libpipelane_cuda_backend.so tests/runtime/test_backend_ops tests/cuda/test_cuda_gpu tests/cuda/gpu_check_tool; do
  ln -s "$build/$f" "$bin/$(basename "$f")"
done
status=0
for c in command1 command2; do
  OUT=$out/$c GPU_BIN_OVERRIDE=1 GPU_BIN=$bin GPU_LIB= bash scripts/gpu/$c.sh || status=1
done
exit $status
