#!/usr/bin/env bash
# The first thing to try: set up, build, tokenize the default corpus (the Jargon File) and train
# configs/tiny.ini as a 2-stage pipeline (mpirun -np 2) whose bubbles run two side-task lanes
# (PageRank and an image pipeline), printing text samples as it learns; then write the run's HTML
# report. Extra arguments go to `pipelane train` (e.g. --train.steps=50).
# PIPELANE_RUN_SINGLE=1 trains in one process without lanes instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# Build only what this script runs (the `pipelane` program: lanes and lane workers are in it; the
# test suite is scripts/test.sh's), showing ninja's [done/total] with an ETA from the rate so far:
# in place on a terminal, one line per tenth otherwise. On failure the end of the log says why.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
awk=(awk)  # Debian's mawk reads a pipe in blocks unless told not to: progress would arrive late
awk -W version 2>&1 | grep -q mawk && awk=(awk -W interactive)
echo "== building pipelane (a fresh build takes a few minutes on 2 cores)"
if ! scripts/build.sh --target pipelane 2>&1 | tee "$log" | "${awk[@]}" -v tty="$([ -t 1 ] && echo 1 || echo 0)" '
    function now() { srand(); return srand() }  # seconds since the epoch, in mawk and gawk
    BEGIN { start = now() }
    match($0, /^\[([0-9]+)\/([0-9]+)\]/) {
      split(substr($0, 2, RLENGTH - 2), n, "/"); pct = int(100 * n[1] / n[2]);
      spent = now() - start; eta = n[1] > 0 ? int(spent * (n[2] - n[1]) / n[1]) : 0;
      left = (n[1] >= 5 && spent >= 5) ? sprintf(", about %d:%02d left", eta / 60, eta % 60) : "";
      if (tty == 1) { printf "\r   building: %3d%% (%d/%d)%s      ", pct, n[1], n[2], left; fflush() }
      else if (pct >= next_pct) { printf "   building: %3d%% (%d/%d)%s\n", pct, n[1], n[2], left; fflush(); next_pct = pct - pct % 10 + 10 }
      shown = 1
    }
    END { if (tty == 1 && shown) printf "\n"; if (shown) printf "   built in %d:%02d\n", (now() - start) / 60, (now() - start) % 60 }'; then
  tail -n 40 "$log"
  echo "scripts/run.sh: the build failed (above)" >&2
  exit 1
fi

jargon=/usr/share/doc/jargon-text/jargon.txt.gz
# data/jargon.h5 (bytes) is what configs/tiny.ini, configs/pp2.ini and the README's examples train
# on; it takes a second. Bytes keep the demo's two stages balanced (configs/tiny.ini says why).
data=data/jargon.h5
if [ ! -f "$data" ]; then
  echo "== preparing $data from the Jargon File (byte tokenizer)"
  build/pipelane prepare-data --tokenizer byte --input "$jargon" --output "$data"
fi
# Samples at steps 250 and 500; a checkpoint after the last step is the default (for `generate`);
# every run.sh trains afresh.
overrides=(--train.sample_every=250 --train.sample_tokens=64 --train.sample_prompt="hacker: n." --run.resume=none)
# A key given here replaces the same key above (a key may appear once on the command line).
for arg in "$@"; do
  key=${arg%%=*}
  for i in "${!overrides[@]}"; do [ "${overrides[$i]%%=*}" = "$key" ] && unset 'overrides[i]'; done
done
run_dir=runs/tiny-pp2-lanes
[ "${PIPELANE_RUN_SINGLE:-0}" = 1 ] && run_dir=runs/tiny
# Every run.sh trains afresh: the previous demo run (its checkpoints would stop a fresh start) goes.
if [ -d "$run_dir" ]; then
  echo "== replacing the previous run in $run_dir"
  rm -rf "$run_dir"
fi
if [ "${PIPELANE_RUN_SINGLE:-0}" = 1 ]; then
  echo "== training configs/tiny.ini (bytes), one process"
  build/pipelane train --config configs/tiny.ini --run.dir=$run_dir "${overrides[@]}" "$@"
else
  # PageRank with tolerance 0 iterates until max_iterations instead of converging during the
  # lanes' calibration (it did at scale 16, and then did nothing for the rest of the run).
  lanes=(--lanes.enabled=pagerank,imageproc
         --lane.pagerank.generate=rmat --lane.pagerank.scale=16
         --lane.pagerank.tolerance=0 --lane.pagerank.max_iterations=1000000
         --lane.imageproc.generate=100000
         # Small outputs: the lane keeps going for the whole run (its work is the 640x480
         # source), and its thousands of PNGs (about 16 KiB each) stay far below the 1 GiB output quota.
         --lane.imageproc.out_width=128 --lane.imageproc.out_height=96 --lane.imageproc.png_compression=6)
  mpi=(mpirun -np 2)
  [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
  echo "== training configs/tiny.ini (bytes): 2 pipeline stages, lanes pagerank + imageproc"
  "${mpi[@]}" build/pipelane train --config configs/tiny.ini --parallel.pp=2 --run.dir=$run_dir \
    "${lanes[@]}" "${overrides[@]}" "$@"
fi
echo
echo "== the run's report (open it in a browser; it fetches nothing)"
build/pipelane report "$run_dir"
echo "   samples:    $run_dir/samples.jsonl"
[ -d "$run_dir/checkpoints" ] && echo "   more text:  build/pipelane generate --model $run_dir --prompt 'hacker: n.' --tokens 200"
exit 0
