# The GPU check's shared part, sourced by command1.sh and command2.sh (scripts/gpu/README.md):
# where the binaries and libraries are, one record per stage in $OUT/report.json (rewritten after
# every stage, so a run cut short keeps what it measured), one log ($OUT/gpu.log), one compact line
# per stage on stdout, and every external command under a time limit.
#
# The caller sets GPU_COMMAND (command1 | command2) and STAGE_TIMEOUTS (name -> seconds, declared
# at the top of each command: tests/scripts/test_gpu_stages.sh sums them) before sourcing this.
set -uo pipefail

gpu_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-/tmp/pipelane-gpu-out}
WORK=${GPU_WORK:-/tmp/pipelane-gpu-work}  # data, configs, run folders: never under $OUT
mkdir -p "$OUT" "$WORK"
report=$OUT/report.json
log=$OUT/gpu.log
stages_file=$WORK/$GPU_COMMAND.stages.jsonl
: >"$stages_file"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
failed=0
have_gpu=false

json_string() {  # a JSON string literal of $1 (control characters dropped)
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/}
  s=${s//$'\t'/\\t}
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')"
}

write_report() {
  {
    printf '{"schema": 2, "command": %s, "started": %s, "updated": %s, "host": %s, "gpu": %s, "stages": [' \
      "$(json_string "$GPU_COMMAND")" "$(json_string "$started")" \
      "$(json_string "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" "$(json_string "$(hostname)")" "$have_gpu"
    paste -sd, "$stages_file"
    printf ']}\n'
  } >"$report.tmp" && mv "$report.tmp" "$report"
}

# stage NAME STATUS SECONDS NOTE [DATA]: one record. STATUS is pass | ok | fail | error |
# skipped. DATA is kept as JSON when it is one JSON object, else as a string.
stage() {
  local name=$1 status=$2 seconds=$3 note=$4 data=${5:-null}
  local json_start='^[[:space:]]*[{]'
  if [[ ! $data =~ $json_start ]] && [ "$data" != null ]; then data=$(json_string "$data"); fi
  case $status in fail | error) failed=1 ;; esac
  printf '{"name": %s, "status": %s, "seconds": %s, "limit_s": %s, "note": %s, "data": %s}\n' \
    "$(json_string "$name")" "$(json_string "$status")" "$seconds" "${STAGE_TIMEOUTS[$name]:-0}" \
    "$(json_string "$note")" "$data" >>"$stages_file"
  write_report
  printf '%-18s %-7s %4ss  %s\n' "$name" "$status" "$seconds" "$note"
  printf '== %s: %s (%ss) %s\n' "$name" "$status" "$seconds" "$note" >>"$log"
}

# run_timed LIMIT CMD...: CMD under a time limit; sets $elapsed, $output (stdout+stderr), $rc
# (124: past its limit). The output goes to the log as well.
run_timed() {
  local limit=$1
  shift
  local t0=$SECONDS
  output=$(timeout --kill-after=5 "$limit" "$@" 2>&1)
  rc=$?
  elapsed=$((SECONDS - t0))
  { printf -- '-- %s (limit %ss, rc %s, %ss)\n' "$*" "$limit" "$rc" "$elapsed"; printf '%s\n' "$output" | tail -n 60; } >>"$log"
}

# run_stage NAME CMD...: CMD under the stage's own limit (STAGE_TIMEOUTS[NAME]).
run_stage() {
  local name=$1
  shift
  run_timed "${STAGE_TIMEOUTS[$name]:?no time limit declared for stage $name}" "$@"
}

tail_text() { printf '%s\n' "$1" | tail -n "${2:-12}"; }
last_json_line() { printf '%s\n' "$1" | grep -E '^\{.*\}$' | tail -n 1; }
json_status() {  # the "status" of a tool's JSON line; error when there is none
  local s
  s=$(sed -n 's/.*"status": *"\([a-z ]*\)".*/\1/p' <<<"$1" | head -n 1)
  echo "${s:-error}"
}

# gtest_status RC OUTPUT: pass only when the executable exited 0 AND ran at least one test that
# did not skip; "fail" when it ran none (a filter matching nothing prints "Running 0 tests" and
# exits 0) or the run was cut short; "skipped" when every test it ran skipped itself.
gtest_status() {
  local rc=$1 text=$2 ran skipped
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' <<<"$text" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed below.*/\1/p' <<<"$text" | tail -n 1)
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo fail; return; fi
  if [ -z "$ran" ] || [ "$ran" -eq 0 ]; then echo fail; return; fi
  if [ "$rc" -ne 0 ]; then echo fail; return; fi
  if [ -n "$skipped" ] && [ "$skipped" -ge "$ran" ]; then echo skipped; return; fi
  echo pass
}
gtest_summary() {  # the counts gtest prints at its end, on one line
  grep -E '^\[(==========|  PASSED  |  FAILED  |  SKIPPED ) \]' <<<"$1" | tail -n 4 | tr '\n' ' '
}

# gtest_stage NAME NOTE EXE [ARGS...]: a gtest executable as one stage.
gtest_stage() {
  local name=$1 note=$2
  shift 2
  run_stage "$name" "$@"
  local status
  status=$(gtest_status "$rc" "$output")
  local detail
  detail="$(gtest_summary "$output")"
  [ "$rc" -eq 124 ] && detail="past its ${STAGE_TIMEOUTS[$name]} s limit; $detail"
  [ "$status" = fail ] && detail="$detail $(grep -E '^\[  FAILED  \]|Failure|error' <<<"$output" | head -n 8 | tr '\n' ' ')"
  stage "$name" "$status" "$elapsed" "$note" "$detail"
}

# ---- where things are ----
# The bundle (scripts/gpu_bundle.sh) unpacks to $GPU_PREFIX: bin/ (the executables, the backend
# library beside pipelane) and lib/ (the non-CUDA shared libraries they were linked with here).
# A build folder works too: GPU_BIN=build GPU_LIB= (scripts/gpu_check.sh).
GPU_PREFIX=${GPU_PREFIX:-/tmp/pipelane-gpu}
GPU_BIN=${GPU_BIN:-$GPU_PREFIX/bin}
GPU_LIB=${GPU_LIB-$GPU_PREFIX/lib}

# unpack_bundle LIMIT: the bundle carried in gpu-bundle/ unpacked into $GPU_PREFIX.
unpack_bundle() {
  local archive=$gpu_root/gpu-bundle/pipelane-gpu.tar.xz
  [ -f "$archive" ] || { echo "no bundle at $archive: run scripts/gpu_bundle.sh here and carry gpu-bundle" >&2; return 1; }
  rm -rf "$GPU_PREFIX" && mkdir -p "$GPU_PREFIX" && timeout "$1" tar -xJf "$archive" -C "$GPU_PREFIX"
}

# wheel_library_dirs: the lib/ folders of the pip wheels nvidia-cudnn-cu13, nvidia-nccl-cu13 and
# nvidia-cublas (cuDNN, NCCL, then cuBLAS), as python3 finds them: one call, under a limit. The
# wheels hold only versioned sonames (libcudnn.so.9), which is all the loader needs.
wheel_library_dirs() {
  local py=python3
  command -v "$py" >/dev/null 2>&1 || py=/opt/torch/.venv/bin/python3
  timeout 15 "$py" - <<'PY' 2>/dev/null
import importlib.util, os
for name in ("nvidia.cudnn", "nvidia.nccl", "nvidia.cublas"):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    for root in (spec.submodule_search_locations or []) if spec else []:
        lib = os.path.join(root, "lib")
        if os.path.isdir(lib):
            print(lib)
            break
PY
}

# cuda_library_path: the CUDA libraries come from the machine itself: the wheels' folders first
# (cuDNN and NCCL live only there on the lent machine), then the toolkit's lib64 (cudart,
# cuBLASLt). The wheels' cuBLAS comes after the toolkit's: cuBLASLt must match cudart's toolkit.
cuda_library_path() {
  local dirs=() d wheel_cublas=""
  while read -r d; do
    [ -n "$d" ] || continue
    if [[ $d == */cublas/lib ]]; then wheel_cublas=$d; else dirs+=("$d"); fi
  done < <(wheel_library_dirs)
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && dirs+=("$d"); done
  [ -n "$wheel_cublas" ] && dirs+=("$wheel_cublas")
  (IFS=:; echo "${dirs[*]}")
}

# link_missing_libraries: the bundle's lib/ holds every non-CUDA library the binaries were linked
# with here; only those whose soname this machine lacks are linked into $GPU_PREFIX/use, which
# goes on LD_LIBRARY_PATH (the machine's own copy wins otherwise). libstdc++ is linked too when
# the machine's is older than the one the binaries need.
link_missing_libraries() {
  local use=$GPU_PREFIX/use lib name
  rm -rf "$use" && mkdir -p "$use"
  [ -n "$GPU_LIB" ] && [ -d "$GPU_LIB" ] || return 0
  local known
  known=$(timeout 5 ldconfig -p 2>/dev/null)
  for lib in "$GPU_LIB"/*; do
    name=$(basename "$lib")
    # ldconfig -p lists "<tab>libz.so.1 (libc6,x86-64) => /usr/lib/...".
    if ! grep -qF "$(printf '\t')$name (" <<<"$known" || { [[ $name == libstdc++.so.* ]] && ! system_libstdcxx_has "$(need_glibcxx)"; }; then
      ln -s "$lib" "$use/$name"
    fi
  done
  ls "$use"
}
need_glibcxx() { cat "$GPU_LIB/../glibcxx" 2>/dev/null || echo GLIBCXX_3.4.30; }
system_libstdcxx_has() {
  local f
  f=$(timeout 5 ldconfig -p | sed -n 's/.*libstdc++\.so\.6 (libc6,x86-64) => //p' | head -n 1)
  [ -n "$f" ] && grep -qa "$1" "$f"
}

# environment_setup: LD_LIBRARY_PATH for the binaries; sets $libs_note.
environment_setup() {
  local linked cuda_path
  linked=$(link_missing_libraries | tr '\n' ' ')
  cuda_path=$(cuda_library_path)
  export LD_LIBRARY_PATH="$GPU_PREFIX/use${cuda_path:+:$cuda_path}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PIPELANE_BACKEND_DIR=$GPU_BIN OMP_WAIT_POLICY=passive
  libs_note="linked from the bundle: ${linked:-none}; CUDA libraries from: $cuda_path"
}

# detect_gpu: sets have_gpu and $gpu_note (nvidia-smi, under a limit).
detect_gpu() {
  gpu_note="no nvidia-smi"
  [ -n "${GPU_CHECK_ASSUME_NO_GPU:-}" ] && { gpu_note="none (GPU_CHECK_ASSUME_NO_GPU)"; return; }
  if command -v nvidia-smi >/dev/null 2>&1; then
    if gpu_note=$(timeout 15 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1); then
      have_gpu=true
    fi
  fi
}

# library_load_stage: `pipelane devices` must load the backend library; "no device" is fine
# without a GPU, a library that did not load (a missing soname, another build's ABI) is a failure.
library_load_stage() {
  local t0=$SECONDS
  run_timed 20 "$GPU_BIN/pipelane" devices
  local devices_rc=$rc devices_output=$output
  local status=fail note="pipelane devices: the CUDA backend library loads and lists the GPU"
  if [ "$devices_rc" -eq 0 ] && grep -q '^cuda:0: ' <<<"$devices_output"; then
    status=pass
  elif [ "$devices_rc" -eq 0 ] && grep -q '^cuda: unavailable: no device' <<<"$devices_output"; then
    status=$($have_gpu && echo fail || echo pass)
    note="the library loaded; no device"
  fi
  # What the binaries would load and cannot: the first thing to read when this stage fails.
  local files=() f missing
  for f in "$GPU_BIN"/pipelane "$GPU_BIN"/libpipelane_cuda_backend.so "$GPU_BIN"/test_* "$GPU_BIN"/gpu_check_tool; do
    [ -f "$f" ] && files+=("$f")
  done
  missing=$(timeout 10 ldd "${files[@]}" 2>/dev/null | grep 'not found' | sort -u | tr -s ' \t\n' ' ')
  [ -n "$missing" ] && status=fail && note="$note; missing: $missing"
  stage library_load "$status" $((SECONDS - t0)) "$note" "$(tail_text "$devices_output" 6)"
  [ "$status" = pass ]
}

# write_train_ini FILE RUN_DIR DATA LAYERS D_MODEL HEADS SEQ_LEN MICRO_BATCH STEPS [TRAIN_LINE]: a
# config for `pipelane train` on the GPU over a synthetic corpus, one warm-up step, no evaluation.
write_train_ini() {
  cat >"$1" <<EOF
[runtime]
backend = cuda
[model]
layers = $4
d_model = $5
heads = $6
seq_len = $7
vocab_size = 50304
[train]
micro_batch = $8
global_batch = $8
steps = $9
warmup_steps = 1
eval_every = 0
threads = 4
${10:-}
[data]
path = $3
tokenizer = gpt2
[run]
dir = $2
log_every = 1
resume = none
EOF
}

# skip_gpu_stages NAME...: without a GPU every stage that needs one says so.
skip_gpu_stages() {
  local s
  for s in "$@"; do stage "$s" skipped 0 "skipped: no GPU"; done
}

finish() {
  stage_sum=0
  for s in "${!STAGE_TIMEOUTS[@]}"; do stage_sum=$((stage_sum + STAGE_TIMEOUTS[$s])); done
  echo "$GPU_COMMAND: $([ $failed -eq 0 ] && echo 'no stage failed' || echo 'some stage FAILED'); report $report, log $log (stage limits sum to ${stage_sum} s)"
  exit $failed
}
