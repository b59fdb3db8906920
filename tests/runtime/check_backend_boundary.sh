#!/usr/bin/env bash
# The Backend is the only door to compute: outside runtime/, no code calls the CPU kernels
# (cpu::), parallelises a loop itself (#pragma omp, omp_*), calls BLAS, or includes a runtime
# header below the backend level. Prints each offending line; exits 1 if there is any.
set -uo pipefail
cd "$(dirname "$0")/../.."
folders=(model parallel lanes trainer datasets)
status=0
bad=$(grep -rnE '(^|[^a-z_])cpu::|#[[:space:]]*pragma[[:space:]]+omp|(^|[^a-z_])omp_[a-z_]+\(|cblas_|openblas_' \
        --include='*.cpp' --include='*.h' --include='*.inl' --include='*.c' "${folders[@]}")
if [ -n "$bad" ]; then
  echo "compute outside runtime/ (call it through runtime/backend.h):"; echo "$bad"; status=1
fi
# Besides the interface: the graph ops' reference semantics that a lane's host loop shares with
# the backends (serial state transitions and loops, no kernels): graph_step_finish.h, graphsgd_edges.h.
allowed='runtime/(backend|backend_registry|arena|tensor|graph_step_finish|graphsgd_edges)\.h'
includes=$(grep -rnE '#include "runtime/' --include='*.cpp' --include='*.h' "${folders[@]}" | grep -vE "\"$allowed\"")
if [ -n "$includes" ]; then
  echo "runtime headers below the backend level (only backend.h, backend_registry.h, arena.h, tensor.h, graph_step_finish.h, graphsgd_edges.h):"
  echo "$includes"; status=1
fi
[ $status -eq 0 ] && echo "backend boundary: clean (${folders[*]})"
exit $status
