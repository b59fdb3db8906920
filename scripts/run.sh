#!/usr/bin/env bash
# The first thing to try: set up, build, tokenize the default corpus (the Jargon File) and train
# configs/tiny.ini as a 2-stage pipeline (mpirun -np 2) whose bubbles run two side-task lanes
# (PageRank and an image pipeline). Extra arguments go to `pipelane train` (e.g. --train.steps=50).
# PIPELANE_RUN_SINGLE=1 trains in one process without lanes instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "== building"
scripts/build.sh >/dev/null
# GPT-2 BPE when scripts/setup.sh could fetch its files (configs/tiny.ini's default), bytes otherwise.
gpt2_dir="${PIPELANE_GPT2_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/gpt2}"
if [ -f "$gpt2_dir/encoder.json" ] && [ -f "$gpt2_dir/vocab.bpe" ]; then
  tokenizer=gpt2 data=data/jargon-gpt2.h5
  # The 50257-row head makes a gpt2 step ~5x a byte step: fewer steps keep the run to a few minutes.
  overrides=(--train.steps=120 --train.eval_every=60)
else
  tokenizer=byte data=data/jargon.h5
  overrides=(--data.path=$data --data.tokenizer=byte --model.vocab_size=256)
fi
if [ ! -f "$data" ]; then
  echo "== preparing $data from the Jargon File ($tokenizer tokenizer)"
  build/pipelane prepare-data --tokenizer $tokenizer --input /usr/share/doc/jargon-text/jargon.txt.gz --output "$data"
fi
if [ "${PIPELANE_RUN_SINGLE:-0}" = 1 ]; then
  echo "== training configs/tiny.ini ($tokenizer tokenizer), one process"
  exec build/pipelane train --config configs/tiny.ini "${overrides[@]}" "$@"
fi
lanes=(--lanes.enabled=pagerank,imageproc
       --lane.pagerank.generate=rmat --lane.pagerank.scale=16
       --lane.imageproc.generate=100000)
mpi=(mpirun -np 2)
[ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
echo "== training configs/tiny.ini ($tokenizer tokenizer): 2 pipeline stages, lanes pagerank + imageproc"
"${mpi[@]}" build/pipelane train --config configs/tiny.ini --parallel.pp=2 --run.dir=runs/tiny-pp2-lanes \
  "${lanes[@]}" "${overrides[@]}" "$@"
