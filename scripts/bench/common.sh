# Shared by the training benchmarks in scripts/bench (sourced from the repository root, after
# their options are read): dependencies (scripts/setup.sh with $setup_flags), the build, the
# Jargon File corpus they train on, mpirun as root, and a scratch directory $out removed on exit.
scripts/setup.sh ${setup_flags:-}
scripts/build.sh ${build_targets:-} >/dev/null
[ -f data/jargon.h5 ] || build/pipelane prepare-data --input /usr/share/doc/jargon-text/jargon.txt.gz \
  --output data/jargon.h5 >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
