#!/usr/bin/env bash
# The GPU check (L3 of runtime/cuda/README.md): what only a GPU can show, in one run of about five
# minutes on one H200. Builds from this tree (nvcc, CMake, Ninja and the Debian packages of
# scripts/setup.sh must be there), then runs one stage after another and rewrites
# $OUT/report.json after each, so a run cut short still leaves what it measured.
#   scripts/gpu_check.sh            OUT defaults to ./gpu_check_out; the build goes to build-gpu/
#   GPU_CHECK_ARCH=90               CUDA architectures to build (default: 90 on a GPU run, 80;90 otherwise)
#   GPU_CHECK_EMULATED=1            also run the emulated stages on a GPU machine (always without one)
# Without a GPU (e.g. in CI) it still builds, runs the emulated stages, and marks every GPU stage
# "skipped: no GPU". Exit code: 0 when no stage failed or errored, 1 otherwise.
# The report format is documented in runtime/cuda/README.md ("gpu_check.sh").
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
OUT=${OUT:-$root/gpu_check_out}
mkdir -p "$OUT"
build=${GPU_CHECK_BUILD_DIR:-$root/build-gpu}
report=$OUT/report.json
stages=$OUT/stages.jsonl
: >"$stages"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
failed=0

json_string() {  # a JSON string literal of $1
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/}
  s=${s//$'\t'/\\t}
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')"
}

write_report() {
  {
    printf '{"schema": 1, "started": %s, "updated": %s, "host": %s, "gpu": %s, "stages": [' \
      "$(json_string "$started")" "$(json_string "$(date -u +%Y-%m-%dT%H:%M:%SZ)")" \
      "$(json_string "$(hostname)")" "$have_gpu"
    paste -sd, "$stages"
    printf ']}\n'
  } >"$report.tmp" && mv "$report.tmp" "$report"
}

# stage NAME STATUS SECONDS NOTE [DATA]: one record. DATA is kept as JSON when it is one JSON
# object (the tools print one per line); anything else is kept as a string.
stage() {
  local name=$1 status=$2 seconds=$3 note=$4 data=${5:-null}
  local json_start='^[[:space:]]*[{]'
  if [[ ! $data =~ $json_start ]] && [ "$data" != null ]; then data=$(json_string "$data"); fi
  case $status in fail|error) failed=1 ;; esac
  printf '{"name": %s, "status": %s, "seconds": %s, "note": %s, "data": %s}\n' "$(json_string "$name")" \
    "$(json_string "$status")" "$seconds" "$(json_string "$note")" "$data" >>"$stages"
  write_report
  echo "gpu_check: $name: $status ${note:+($note)}" >&2
}

# run_timed SECONDS CMD...: runs CMD with a time limit; sets $elapsed, $output (stdout+stderr), $rc.
run_timed() {
  local limit=$1
  shift
  local t0=$SECONDS
  output=$(timeout --kill-after=10 "$limit" "$@" 2>&1)
  rc=$?
  elapsed=$((SECONDS - t0))
}

last_json_line() { printf '%s\n' "$1" | grep -E '^\{.*\}$' | tail -n 1; }
status_of() {  # the "status" of a tool's JSON line; error when there is none
  local s
  s=$(sed -n 's/.*"status":"\([a-z ]*\)".*/\1/p' <<<"$1" | head -n 1)
  echo "${s:-error}"
}
tail_text() { printf '%s\n' "$1" | tail -n "${2:-15}"; }

# ---- environment ----
have_gpu=false
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then have_gpu=true; fi
env_note="nvcc: $( (/usr/local/cuda/bin/nvcc --version 2>/dev/null || nvcc --version 2>/dev/null) | tail -n 1)"
env_note+="; cmake: $(cmake --version 2>/dev/null | head -n 1); ninja: $(ninja --version 2>/dev/null); cores: $(nproc)"
if $have_gpu; then
  env_note+="; $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | head -n 1)"
fi
stage environment ok 0 "$env_note"

# ---- build ----
arch=${GPU_CHECK_ARCH:-$($have_gpu && echo 90 || echo "80;90")}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
targets=(pipelane test_backend_ops test_cuda_backend test_cuda_lanes)
$have_gpu || targets+=(test_cuda_plans)
run_timed 120 cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DPIPELANE_CUDA=ON \
  "-DCMAKE_CUDA_ARCHITECTURES=$arch"
if [ $rc -ne 0 ]; then
  stage build error "$elapsed" "cmake configure failed (rc $rc)" "$(tail_text "$output")"
  exit 1
fi
configure_s=$elapsed
run_timed 900 cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}" pipelane_cuda gpu_check_tool test_cuda_gpu
if [ $rc -ne 0 ]; then
  stage build error "$((configure_s + elapsed))" "build failed (rc $rc)" "$(tail_text "$output" 25)"
  exit 1
fi
stage build ok "$((configure_s + elapsed))" "CUDA architectures $arch; targets ${targets[*]} pipelane_cuda gpu_check_tool test_cuda_gpu"
tool=$build/tests/cuda/gpu_check_tool
export PIPELANE_BACKEND_DIR=$build PIPELANE_BUILD_DIR=$build OMP_WAIT_POLICY=passive

run_timed 60 "$build/pipelane" devices
stage devices "$([ $rc -eq 0 ] && echo ok || echo error)" "$elapsed" "pipelane devices" "$output"

# ---- emulated stages (the CUDA backend's source on the CPU emulator) ----
if ! $have_gpu || [ "${GPU_CHECK_EMULATED:-0}" = 1 ]; then
  run_timed 600 "$build/tests/runtime/test_backend_ops" --gtest_filter='*cuda_emulated*'
  stage emulated_op_parity "$([ $rc -eq 0 ] && echo pass || echo fail)" "$elapsed" \
    "every op of the op table on the emulated CUDA backend vs the reference and the CPU backend" "$(tail_text "$output" 3)"
  run_timed 600 "$build/tests/cuda/test_cuda_backend"
  stage emulated_backend "$([ $rc -eq 0 ] && echo pass || echo fail)" "$elapsed" \
    "streams, events, memory, bf16 ops, bf16 compute, tiny GPT vs CPU (1e-5; bf16 vs the CPU's bf16), lane load bit-identical" \
    "$(tail_text "$output" 3)"
  run_timed 300 "$build/tests/cuda/test_cuda_lanes"
  stage emulated_lanes "$([ $rc -eq 0 ] && echo pass || echo fail)" "$elapsed" \
    "prefill, smalltrain and pagerank lanes on the device through the executor: bit-identical, planned steps, pool quota, training's thread never waits for a lane" \
    "$(tail_text "$output" 3)"
  if [ -x "$build/tests/cuda/test_cuda_plans" ]; then
    run_timed 300 "$build/tests/cuda/test_cuda_plans"
    stage plans "$([ $rc -eq 0 ] && echo pass || echo fail)" "$elapsed" \
      "GEMM/attention/NCCL plans; NCCL refuses cleanly without a GPU" "$(tail_text "$output" 3)"
  fi
fi

if ! $have_gpu; then
  for s in device op_parity_fp32 op_parity_bf16 cudnn_attention train_parity gemm_peak mfu_350m mfu_1p3b mfu_350m_cudnn lanes lanes_train pool_quota; do
    stage "$s" skipped 0 "no GPU"
  done
  echo "gpu_check: report in $report" >&2
  exit $failed
fi

# ---- on the GPU ----
run_timed 60 "$tool" env
stage device "$([ $rc -eq 0 ] && echo ok || echo error)" "$elapsed" "device, priorities, versions" "$(last_json_line "$output")"

run_timed 300 "$build/tests/runtime/test_backend_ops" --gtest_filter='*/cuda'
stage op_parity_fp32 "$([ $rc -eq 0 ] && echo pass || echo fail)" "$elapsed" \
  "every op of the op table on the CUDA backend (cuBLASLt) vs the double reference and the CPU backend" \
  "$(tail_text "$output" 8)"

run_timed 120 "$build/tests/cuda/test_cuda_gpu" --gtest_filter='-CudnnAttention*'
stage op_parity_bf16 "$([ $rc -eq 0 ] && echo pass || echo fail)" "$elapsed" \
  "bf16 matmul, attention, LM head, AdamW copy vs the CPU fp32 ops (llm.c tolerance); bf16 compute (fp32 storage, bf16 GEMM operands) vs its double reference and the CPU's bf16 emulation" \
  "$(tail_text "$output" 8)"

# [model] attention = cudnn: does an engine of the installed cuDNN fuse our causal-attention graphs
# on this GPU (fp32 and bf16 compute), and do they match the CPU backend? A missing engine fails
# the test with cuDNN's one-line reason, which the report keeps.
run_timed 120 "$build/tests/cuda/test_cuda_gpu" --gtest_filter='CudnnAttention*'
stage cudnn_attention "$([ $rc -eq 0 ] && echo pass || echo fail)" "$elapsed" \
  "cuDNN fused causal attention (graphs of plans/attention_graph.h), fp32 and bf16 compute, odd sizes, vs the CPU backend" \
  "$(tail_text "$output" 12)"

run_timed 120 "$tool" train-parity
line=$(last_json_line "$output")
stage train_parity "$(status_of "$line")" "$elapsed" \
  "tiny GPT, 5 steps through the executor: CUDA vs CPU losses and grad norms within 1e-5 relative; bf16 compute: losses within 0.05 of the CPU fp32 run" \
  "${line:-$(tail_text "$output")}"

run_timed 120 "$tool" gemm-peak 8192
peak_line=$(last_json_line "$output")
stage gemm_peak "$([ $rc -eq 0 ] && echo ok || echo error)" "$elapsed" "cuBLASLt 8192^3 fp32 and bf16, best of 5" \
  "${peak_line:-$(tail_text "$output")}"
bf16_peak=$(sed -n 's/.*"bf16_tflops":\([0-9.e+-]*\).*/\1/p' <<<"$peak_line")
fp32_peak=$(sed -n 's/.*"fp32_tflops":\([0-9.e+-]*\).*/\1/p' <<<"$peak_line")

# MFU of `pipelane train --train.precision=bf16` (autocast style: bf16 GEMM operands, fp32 storage
# and everything else) on a synthetic gpt2 corpus, 3 warm-up + 10 steps, against the dense bf16
# peak of the GPU's datasheet (H100/H200 SXM: 989 TFLOP/s) and against the measured cuBLASLt GEMMs.
dense_bf16_tflops=${GPU_CHECK_DENSE_BF16_TFLOPS:-989}
data=$OUT/synthetic.h5
[ -f "$data" ] || "$tool" make-data "$data" 400000 50257 >/dev/null
# write_train_ini FILE RUN_DIR LAYERS D_MODEL HEADS SEQ_LEN MICRO_BATCH STEPS [TRAIN_LINE]: a config
# for `pipelane train` on the GPU over the synthetic corpus, one warm-up step, no evaluation.
write_train_ini() {
  cat >"$1" <<EOF
[runtime]
backend = cuda
[model]
layers = $3
d_model = $4
heads = $5
seq_len = $6
vocab_size = 50304
[train]
micro_batch = $7
global_batch = $7
steps = $8
warmup_steps = 1
eval_every = 0
threads = 4
${9:-}
[data]
path = $data
tokenizer = gpt2
[run]
dir = $2
log_every = 1
resume = none
EOF
}
mfu_stage() {  # NAME LAYERS D_MODEL HEADS [PIPELANE_TRAIN_OPTION...]
  local name=$1 dir=$OUT/run_$1
  rm -rf "$dir"
  write_train_ini "$OUT/$name.ini" "$dir" "$2" "$3" "$4" 1024 8 13 "peak_gflops = $((dense_bf16_tflops * 1000))"
  run_timed 240 "$build/pipelane" train --config "$OUT/$name.ini" --train.precision=bf16 "${@:5}"
  if [ $rc -ne 0 ] || [ ! -f "$dir/summary.json" ]; then
    stage "$name" error "$elapsed" "pipelane train failed (rc $rc)" "$(tail_text "$output")"
    return
  fi
  local summary tps fpt
  summary=$(tr -d '\n' <"$dir/summary.json")
  tps=$(sed -n 's/.*"tokens_per_s": *\([0-9.e+-]*\).*/\1/p' <<<"$summary" | head -n 1)
  fpt=$(sed -n 's/.*"flops_per_token": *\([0-9.e+-]*\).*/\1/p' <<<"$summary" | head -n 1)
  local mfu
  mfu=$(awk -v t="$tps" -v f="$fpt" -v d="$dense_bf16_tflops" -v b="${bf16_peak:-0}" -v s="${fp32_peak:-0}" 'BEGIN {
    a = t * f / 1e12;
    printf "{\"tokens_per_s\": %s, \"flops_per_token\": %s, \"achieved_tflops\": %.2f, \"mfu_vs_dense_bf16_peak\": %.4f, \"mfu_vs_measured_bf16_gemm\": %.4f, \"mfu_vs_measured_fp32_gemm\": %.4f}",
      t, f, a, a / d, (b > 0 ? a / b : 0), (s > 0 ? a / s : 0) }')
  stage "$name" ok "$elapsed" "bf16 training (--train.precision=bf16${5:+ $5}); 3 warm-up + 10 steps of 8 x 1024 tokens" "$mfu"
}
mfu_stage mfu_350m 24 1024 16
mfu_stage mfu_1p3b 24 2048 16
# The 350M model again with cuDNN's fused attention (saves the [B,NH,T,T] probabilities' memory
# and traffic); skipped when the cudnn_attention stage found no bf16 engine.
if grep -q '"name": "cudnn_attention", "status": "pass"' "$stages"; then
  mfu_stage mfu_350m_cudnn 24 1024 16 --model.attention=cudnn
else
  stage mfu_350m_cudnn skipped 0 "the cudnn_attention stage did not pass"
fi

# Lanes: training alone, then with a lane load at equal priority, at the lowest priority, and in
# an SM partition (green context); losses must not change by one bit.
lanes_data="{"
off_losses=""
for mode in off equal low partition:16; do
  run_timed 180 "$tool" lanes "$mode" 8
  line=$(last_json_line "$output")
  [ -n "$line" ] || line=$(json_string "$(tail_text "$output")")
  losses=$(sed -n 's/.*"loss":\(\[[^]]*\]\).*/\1/p' <<<"$line" | head -n 1)
  [ "$mode" = off ] && off_losses=$losses
  lanes_data+="$( [ "$lanes_data" = "{" ] || echo ,)\"$mode\": $line, \"${mode}_bit_identical\": $([ -n "$losses" ] && [ "$losses" = "$off_losses" ] && echo true || echo false)"
done
lanes_data+="}"
lanes_status=pass
grep -q '_bit_identical": false' <<<"$lanes_data" && lanes_status=fail
stage lanes "$lanes_status" 0 "median step time per mode (overhead = mode / off - 1); losses bit-identical to lanes off" "$lanes_data"

# Lanes through the trainer: `pipelane train` on the GPU with the prefill lane (a device lane: pool
# arena, steps enqueued on its Low stream, timed by events) against lanes off: losses bit for bit
# (metrics.jsonl prints each loss so that it reads back to the same double), median step times,
# and the lane's steps (calibration included) from summary.json. One process is one pipeline
# stage, whose only wait is the gradient sync: the lane gets its calibration and little more here;
# pipeline gaps need a stage per GPU (pp >= 2).
lanes_train_run() {  # MODE [EXTRA OPTIONS...]: trains into $OUT/lanes_train_MODE
  local dir=$OUT/lanes_train_$1
  shift
  rm -rf "$dir"
  write_train_ini "$OUT/lanes_train.ini" "$dir" 4 512 8 512 4 12
  run_timed 240 "$build/pipelane" train --config "$OUT/lanes_train.ini" "$@"
}
lanes_train_facts() {  # MODE: {"median_step_ms", "lane_steps", "lane_status", "losses"} of $OUT/lanes_train_MODE
  python3 - "$OUT/lanes_train_$1" <<'PY' 2>/dev/null || echo '{}'
import json, sys
d = sys.argv[1]
losses = [json.loads(line)["loss"] for line in open(d + "/metrics.jsonl") if '"loss"' in line]
s = json.load(open(d + "/summary.json"))
lanes = ((s.get("lanes") or {}).get("total") or {}).get("lanes") or {}
print(json.dumps({"median_step_ms": s.get("step_ms_median"),
                  "lane_steps": {k: v.get("steps") for k, v in lanes.items()},
                  "lane_status": {k: v.get("quarantine_reason") or "ok" for k, v in lanes.items()},
                  "runs_on": {k: v.get("runs_on") for r in (s.get("lanes") or {}).get("per_rank") or [] if r
                              for k, v in (r.get("lanes") or {}).items()},
                  "losses": losses}))
PY
}
lanes_train_run off
off_rc=$rc off_s=$elapsed
off_facts=$(lanes_train_facts off)
lanes_train_run prefill --lanes.enabled=prefill --lanes.profile_iterations=2
on_rc=$rc on_output=$output
on_facts=$(lanes_train_facts prefill)
off_losses=$(sed -n 's/.*"losses": *\(\[[^]]*\]\).*/\1/p' <<<"$off_facts")
on_losses=$(sed -n 's/.*"losses": *\(\[[^]]*\]\).*/\1/p' <<<"$on_facts")
identical=false
[ -n "$off_losses" ] && [ "$off_losses" = "$on_losses" ] && identical=true
if [ $off_rc -ne 0 ] || [ $on_rc -ne 0 ]; then
  stage lanes_train error "$((off_s + elapsed))" "pipelane train failed (off rc $off_rc, prefill rc $on_rc)" \
    "$(tail_text "$on_output")"
else
  stage lanes_train "$($identical && echo pass || echo fail)" "$((off_s + elapsed))" \
    "pipelane train on the GPU with the prefill lane vs lanes off: losses bit-identical, median step, lane steps" \
    "{\"off\": $off_facts, \"prefill\": $on_facts, \"bit_identical\": $identical}"
fi

run_timed 60 "$tool" pool-quota
line=$(last_json_line "$output")
stage pool_quota "$(status_of "$line")" "$elapsed" \
  "a lane arena past its quota and a pool past its maxSize are refused (ArenaQuotaError)" "${line:-$(tail_text "$output")}"

echo "gpu_check: report in $report" >&2
exit $failed
