#!/usr/bin/env bash
# Makes the GPU check's bundle here, for a lent GPU machine that has the CUDA toolkit, PyTorch and
# the cuDNN/NCCL wheels but maybe none of the Debian packages pipelane links (HDF5, Boost,
# OpenBLAS, Open MPI, ICU, SentencePiece, libpng) and no package registry: prebuilt binaries for
# sm_90 (x86-64-v3 host code, not -march=native: the lent machine's CPU is not this one) and the
# non-CUDA shared libraries they load (from ldd), packed into gpu-bundle/pipelane-gpu.tar.xz
# (ignored by git, carried by the device tool). The CUDA libraries (cudart, cuBLASLt, cuDNN,
# NCCL) are not packed: they come from the machine itself (scripts/gpu/lib.sh finds them).
# Prints the carry list and the exact commands to run there.
#   scripts/gpu_bundle.sh [BUILD_DIR]     default build-gpu-bundle/ (configured here if absent)
# Every external command runs under a time limit; the build's is GPU_BUNDLE_BUILD_TIMEOUT (s).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-$root/build-gpu-bundle}
bundle=$root/gpu-bundle
stage_dir=$(mktemp -d /tmp/pipelane-gpu-bundle.XXXXXX)
trap 'rm -rf "$stage_dir"' EXIT
targets=(pipelane pipelane_cuda test_backend_ops test_cuda_gpu gpu_check_tool)

if [ ! -f "$build/CMakeCache.txt" ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
  timeout 300 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPELANE_CUDA=ON \
    -DPIPELANE_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DCMAKE_CUDA_ARCHITECTURES=90
fi
# The lent machine is an H200 (sm_90) of unknown host CPU: refuse a build for anything else.
grep -Eq '^CMAKE_CUDA_ARCHITECTURES:[A-Z]+=90$' "$build/CMakeCache.txt" ||
  { echo "gpu_bundle: $build is not built for sm_90 only (CMAKE_CUDA_ARCHITECTURES=90)" >&2; exit 1; }
grep -q '^PIPELANE_NATIVE:BOOL=OFF$' "$build/CMakeCache.txt" ||
  { echo "gpu_bundle: $build uses -march=native (PIPELANE_NATIVE=OFF is needed: another CPU runs it)" >&2; exit 1; }
timeout "${GPU_BUNDLE_BUILD_TIMEOUT:-7200}" nice cmake --build "$build" -j "${GPU_BUNDLE_JOBS:-1}" --target "${targets[@]}"

# The executables, stripped; the backend library beside pipelane (the registry looks there).
mkdir -p "$stage_dir/bin" "$stage_dir/lib"
for f in pipelane libpipelane_cuda_backend.so tests/runtime/test_backend_ops tests/cuda/test_cuda_gpu tests/cuda/gpu_check_tool; do
  cp "$build/$f" "$stage_dir/bin/"
  timeout 60 strip --strip-unneeded "$stage_dir/bin/$(basename "$f")"
done

# The shared libraries they load, except the C library's own and CUDA's (those the machine has,
# and must: a driver-matched toolkit, the wheels' cuDNN/NCCL).
cuda_libs='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn|libcudnn_.*|libnccl|libnvrtc.*|libnvJitLink)\.so'
c_libs='^(libc|libm|libdl|librt|libpthread|libutil|ld-linux-x86-64|linux-vdso)\.so'
timeout 60 ldd "$stage_dir"/bin/* | awk '/=> \// {print $1, $3}' | sort -u | while read -r name path; do
  if [[ $name =~ $cuda_libs ]] || [[ $name =~ $c_libs ]]; then continue; fi
  cp -L "$path" "$stage_dir/lib/$name"
done
# The newest libstdc++ symbol version the binaries need (lib.sh links ours only if the machine's lacks it).
timeout 60 objdump -T "$stage_dir"/bin/* 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -Vu | tail -n 1 >"$stage_dir/glibcxx"
# What was built, for the report.
{
  echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (modified)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -n 1 | awk '{print $NF}')"
  echo "cuda: nvcc $(timeout 20 /usr/local/cuda/bin/nvcc --version | tail -n 1), architectures 90"
} >"$stage_dir/BUILD"

mkdir -p "$bundle"
rm -f "$bundle"/pipelane-gpu.tar.xz
timeout 600 tar -C "$stage_dir" -cf - bin lib glibcxx BUILD | timeout 600 xz -T2 -6 >"$bundle/pipelane-gpu.tar.xz"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
unpacked=$(du -sb "$stage_dir" | cut -f1)
packed=$(stat -c %s "$bundle/pipelane-gpu.tar.xz")
tree=$(git -C "$root" ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
total=$((packed + tree))
echo "gpu_bundle: $bundle/pipelane-gpu.tar.xz: $(mib "$packed") MiB packed ($(mib "$unpacked") MiB unpacked: $(ls "$stage_dir/bin" | wc -l) binaries, $(ls "$stage_dir/lib" | wc -l) libraries); tree $(mib "$tree") MiB; $(mib "$total") MiB of the 64 MiB the device tool carries"
[ "$total" -lt $((64 << 20)) ] || { echo "gpu_bundle: too large for the device tool (64 MiB)" >&2; exit 1; }
cat <<EOF

On the lent GPU machine (device tool), carry ["gpu-bundle"] and run, each as one command:
  1. command: bash scripts/gpu/command1.sh   timeout_s: 600   carry: ["gpu-bundle"]
  2. command: bash scripts/gpu/command2.sh   timeout_s: 600   carry: ["gpu-bundle"]
then give the machine back. Each leaves \$OUT/report.json and \$OUT/gpu.log, and prints one line per stage.
EOF
