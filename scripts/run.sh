#!/usr/bin/env bash
# The first thing to try: set up, build, tokenize the default corpus (the Jargon File) and train
# configs/tiny.ini on the CPU. Extra arguments go to `pipelane train` (e.g. --train.steps=100).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== building"
scripts/build.sh >/dev/null
data=data/jargon.h5
if [ ! -f "$data" ]; then
  echo "== preparing $data from the Jargon File"
  build/pipelane prepare-data --input /usr/share/doc/jargon-text/jargon.txt.gz --output "$data"
fi
echo "== training configs/tiny.ini"
build/pipelane train --config configs/tiny.ini "$@"
