#!/usr/bin/env bash
# Runs every command the top-level README shows, in the README's order, after scripts/run.sh
# (they use its build, data and run directory), and stops at the first one that fails. They run
# in a scratch directory (configs/ copied, data/ and the run of scripts/run.sh linked, runs/
# fresh), so nothing lands in the checkout. Training is cut short: every `pipelane train` runs 6
# steps (--train.steps=6, warmup 1, evaluation every 3; a command that checkpoints stops after
# step 4, as a preempted job would, so the next one resumes) and an export reads step 4. Skipped:
# scripts/run.sh and scripts/test.sh themselves, the multi-host launches (hostfile, srun), and
# the GPU examples when `pipelane devices` lists no GPU.
#   scripts/readme_commands.sh [--keep]   (--keep leaves the scratch directory for a look)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
keep=0
case "${1:-}" in
  -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
  --keep) keep=1 ;;
  "") ;;
  *) echo "readme_commands.sh: unknown option '$1'" >&2; exit 2 ;;
esac
[ -x "$repo/build/pipelane" ] && [ -d "$repo/runs/tiny-pp2-lanes" ] ||
  { echo "readme_commands.sh: run scripts/run.sh first" >&2; exit 2; }

scratch=$(mktemp -d)
[ $keep = 1 ] && echo "scratch directory: $scratch" || trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
ln -s "$repo/build" build
# scripts/ as links to the checkout's, except the figures the repro scripts write: they find
# their folder from where they were started (here), and a link to the whole of scripts/ let them
# overwrite the checkout's figures.
mkdir -p scripts/repro/figures
for f in "$repo"/scripts/*; do [ "$(basename "$f")" = repro ] || ln -s "$f" scripts/; done
for f in "$repo"/scripts/repro/*; do [ "$(basename "$f")" = figures ] || ln -s "$f" scripts/repro/; done
cp -r "$repo/configs" configs
cp "$repo/README.md" README.md
mkdir data runs
for f in "$repo"/data/*; do ln -s "$f" data/; done
ln -s "$repo/runs/tiny-pp2-lanes" runs/tiny-pp2-lanes
# The rest of the checkout as it is (scripts find their files next to them: datasets/'s sums, ...).
for f in "$repo"/*; do [ -e "$(basename "$f")" ] || ln -s "$f" .; done
# "Your own corpus" of the README's first example.
{ zcat /usr/share/doc/jargon-text/jargon.txt.gz || true; } | head -c 400000 > my_corpus.txt
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# The commands: ```sh blocks, continuation lines joined, comments dropped; a `for ... done` loop
# stays one command.
mapfile -t commands < <(awk '
  /^```sh/ { inside = 1; next }
  /^```/ { inside = 0; next }
  inside {
    line = $0; sub(/[ \t]+#.*$/, "", line); sub(/^[ \t]*#.*$/, "", line)
    if (line ~ /^[ \t]*$/) next
    if (line ~ /\\$/) { sub(/\\$/, "", line); pending = pending line; next }
    pending = pending line
    if (pending ~ /^for / && pending !~ /done/) { pending = pending " "; next }
    print pending; pending = ""
  }' README.md)

shorten() {  # a train command cut to 6 steps, as described at the top
  local c="$1"
  case "$c" in *" train "*) ;; *) printf '%s' "$c"; return ;; esac
  c=$(printf '%s' "$c" | sed -E 's/--train\.steps=[0-9]+//')
  c="$c --train.steps=6 --train.warmup_steps=1 --train.eval_every=3"
  case "$c" in *--run.checkpoint_every=*) c="PIPELANE_STOP_AFTER_STEP=4 $(printf '%s' "$c" | sed -E 's/--run\.checkpoint_every=[0-9]+/--run.checkpoint_every=2/')" ;; esac
  printf '%s' "$c"
}

ran=0 skipped=0
for c in "${commands[@]}"; do
  case "$c" in
    scripts/run.sh*|scripts/test.sh*|*--hostfile*|srun*) echo "-- skipped: $c"; skipped=$((skipped + 1)); continue ;;
    *--runtime.backend=cuda*)
      if ! build/pipelane devices | grep -q '^cuda:[0-9]'; then
        echo "-- skipped (needs a GPU): $c"; skipped=$((skipped + 1)); continue
      fi ;;
  esac
  c=$(shorten "$c" | sed -E 's/step_00000(500|150)/step_00000004/g')
  echo "== $c"
  if ! bash -c "$c" > cmd.log 2>&1; then
    tail -n 30 cmd.log
    echo "readme_commands.sh: FAILED: $c" >&2
    exit 1
  fi
  tail -n 3 cmd.log | sed 's/^/   /'
  ran=$((ran + 1))
done
echo "readme_commands.sh: all $ran commands worked ($skipped skipped: run.sh, test.sh, multi-host, GPU-only)"
