#!/usr/bin/env bash
# The first thing to try: set up, build, tokenize the default corpus (the Jargon File) and train
# configs/tiny.ini as a 2-stage pipeline (mpirun -np 2) whose bubbles run two side-task lanes
# (PageRank and an image pipeline), printing text samples as it learns; then write the run's HTML
# report. Extra arguments go to `pipelane train` (e.g. --train.steps=50).
# PIPELANE_RUN_SINGLE=1 trains in one process without lanes instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# Build, showing progress: ninja's [done/total] as a percentage, in place on a terminal, one line
# per tenth otherwise. On failure the end of the log says why.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "== building (a fresh build takes several minutes on 2 cores)"
if ! scripts/build.sh 2>&1 | tee "$log" | awk -v tty="$([ -t 1 ] && echo 1 || echo 0)" '
    match($0, /^\[([0-9]+)\/([0-9]+)\]/) {
      split(substr($0, 2, RLENGTH - 2), n, "/"); pct = int(100 * n[1] / n[2]);
      if (tty == 1) { printf "\r   building: %3d%% (%d/%d)", pct, n[1], n[2]; fflush() }
      else if (pct >= next_pct) { printf "   building: %3d%% (%d/%d)\n", pct, n[1], n[2]; fflush(); next_pct = pct - pct % 10 + 10 }
      shown = 1
    }
    END { if (tty == 1 && shown) printf "\n" }'; then
  tail -n 40 "$log"
  echo "scripts/run.sh: the build failed (above)" >&2
  exit 1
fi

jargon=/usr/share/doc/jargon-text/jargon.txt.gz
# data/jargon.h5 (bytes) is what configs/pp2.ini and the README's examples train on; it takes a second.
if [ ! -f data/jargon.h5 ]; then
  echo "== preparing data/jargon.h5 from the Jargon File (byte tokenizer)"
  build/pipelane prepare-data --tokenizer byte --input "$jargon" --output data/jargon.h5
fi
# GPT-2 BPE when scripts/setup.sh could fetch its files (configs/tiny.ini's default), bytes otherwise.
gpt2_dir="${PIPELANE_GPT2_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipelane/gpt2}"
if [ -f "$gpt2_dir/encoder.json" ] && [ -f "$gpt2_dir/vocab.bpe" ]; then
  tokenizer=gpt2 data=data/jargon-gpt2.h5
  # The 50257-row head makes a gpt2 step ~5x a byte step: fewer steps keep the run to a few minutes.
  overrides=(--train.steps=120 --train.eval_every=60 --train.sample_every=60)
else
  tokenizer=byte data=data/jargon.h5
  overrides=(--data.path=$data --data.tokenizer=byte --model.vocab_size=256 --train.sample_every=250)
fi
# A checkpoint after the last step only (for `pipelane generate`); every run.sh trains afresh.
overrides+=(--train.sample_tokens=48 --train.sample_prompt="hacker: n." --run.checkpoint_every=1000000
            --run.resume=none)
# A key given here replaces the same key above (a key may appear once on the command line).
for arg in "$@"; do
  key=${arg%%=*}
  for i in "${!overrides[@]}"; do [ "${overrides[$i]%%=*}" = "$key" ] && unset 'overrides[i]'; done
done
if [ ! -f "$data" ]; then
  echo "== preparing $data from the Jargon File ($tokenizer tokenizer)"
  build/pipelane prepare-data --tokenizer $tokenizer --input "$jargon" --output "$data"
fi
run_dir=runs/tiny-pp2-lanes
[ "${PIPELANE_RUN_SINGLE:-0}" = 1 ] && run_dir=runs/tiny
# Every run.sh trains afresh: the previous demo run (its checkpoints would stop a fresh start) goes.
if [ -d "$run_dir" ]; then
  echo "== replacing the previous run in $run_dir"
  rm -rf "$run_dir"
fi
if [ "${PIPELANE_RUN_SINGLE:-0}" = 1 ]; then
  echo "== training configs/tiny.ini ($tokenizer tokenizer), one process"
  build/pipelane train --config configs/tiny.ini --run.dir=$run_dir "${overrides[@]}" "$@"
else
  lanes=(--lanes.enabled=pagerank,imageproc
         --lane.pagerank.generate=rmat --lane.pagerank.scale=16
         --lane.imageproc.generate=100000
         # Small outputs: the lane keeps going for the whole run (its work is the 640x480
         # source), and its thousands of PNGs (about 16 KiB each) stay far below the 1 GiB output quota.
         --lane.imageproc.out_width=128 --lane.imageproc.out_height=96 --lane.imageproc.png_compression=6)
  mpi=(mpirun -np 2)
  [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
  echo "== training configs/tiny.ini ($tokenizer tokenizer): 2 pipeline stages, lanes pagerank + imageproc"
  "${mpi[@]}" build/pipelane train --config configs/tiny.ini --parallel.pp=2 --run.dir=$run_dir \
    "${lanes[@]}" "${overrides[@]}" "$@"
fi
echo
echo "== the run's report (open it in a browser; it fetches nothing)"
build/pipelane report "$run_dir"
checkpoint=$(ls -d "$run_dir"/checkpoints/step_* 2>/dev/null | tail -n 1)
echo "   samples:    $run_dir/samples.jsonl"
[ -n "$checkpoint" ] && echo "   more text:  build/pipelane generate --model $checkpoint --prompt 'hacker: n.' --tokens 200"
exit 0
