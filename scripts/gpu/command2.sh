#!/usr/bin/env bash
# The GPU check, command 2 of 2 (scripts/gpu/README.md): how fast? The bf16 GEMM peak on random
# inputs, MFU of a ~350M and a ~1.3B GPT in bf16 compute (cuBLASLt attention, then cuDNN's when
# its bf16 engine works at head size 64), lane overhead at equal priority / least priority / in
# an SM partition, what a resident lane kernel costs training's next kernel per lane kind (the
# simulator's interference parameter), and the pool quota's refusal. MFU first: it is what this command is for.
#   bash scripts/gpu/command2.sh        (after command1.sh; $OUT gets report.json and gpu.log)
GPU_COMMAND=command2
# Each stage's limit, about 3x its expected time; the sum must stay under 540 s.
declare -A STAGE_TIMEOUTS=(
  [environment]=60      # unpack 20, ldconfig 2 x 5, python3 15, nvidia-smi 15
  [library_load]=30
  [gemm_peak]=35        # 2 x 8192^3 on random inputs, 8 GEMMs each, plus the uploads (~2 s of GEMMs)
  [mfu_350m]=85         # make-data 15, pipelane train 70 (init ~7 s, 13 steps)
  [mfu_1p3b]=100        # weight init ~25 s on one core, 13 steps
  [mfu_350m_cudnn]=85   # the head-size-64 bf16 gate 15, pipelane train 70
  [lanes_overhead]=100  # equal, low, partition:16 at 30 each, after command 1's off (rerun: 10)
  [pool_quota]=20
  [lane_block]=20       # backend start ~5 s, 6 series of 60 probes (~0.1-1 ms and a sleep of up to 2 ms each)
)
source "$(dirname "$0")/lib.sh"

t0=$SECONDS
env_status=ok
if [ -z "${GPU_BIN_OVERRIDE:-}" ] && ! unpack_bundle 20 >>"$log" 2>&1; then env_status=error; fi
environment_setup
detect_gpu
stage environment "$env_status" $((SECONDS - t0)) "$(uname -m), $(nproc) cores; GPU: $gpu_note; $libs_note"
[ "$env_status" = ok ] || finish
gpu_stages=(gemm_peak mfu_350m mfu_1p3b mfu_350m_cudnn lanes_overhead lane_block pool_quota)
library_load_stage || { skip_gpu_stages "${gpu_stages[@]}"; finish; }
$have_gpu || { skip_gpu_stages "${gpu_stages[@]}"; finish; }

tool=$GPU_BIN/gpu_check_tool
datasheet=${GPU_CHECK_DENSE_BF16_TFLOPS:-989}  # H100/H200 SXM dense bf16
run_stage gemm_peak "$tool" gemm-peak 8192 "$datasheet"
peak_line=$(last_json_line "$output")
stage gemm_peak "$([ "$(json_status "$peak_line")" = ok ] && echo ok || echo error)" "$elapsed" \
  "cuBLASLt 8192^3 fp32 and bf16 on random inputs, median of 7, beside the datasheet's $datasheet TFLOP/s" \
  "${peak_line:-$(tail_text "$output")}"
bf16_peak=$(sed -n 's/.*"bf16_tflops":\([0-9.e+-]*\).*/\1/p' <<<"$peak_line")

# MFU of `pipelane train --train.precision=bf16` on a synthetic gpt2 corpus, 8 x 1024 tokens a
# step, 13 steps (summary.json's tokens_per_s leaves out the warm-up), FLOPs per token by the
# project's own formula (summary.json), against the datasheet and the measured bf16 GEMM.
data=$WORK/synthetic.h5
data_ok=true
mfu_stage() {  # NAME LAYERS D_MODEL HEADS LIMIT [PIPELANE_TRAIN_OPTION...]
  local name=$1 dir=$WORK/run_$1 t0=$SECONDS limit=$5
  rm -rf "$dir"
  write_train_ini "$WORK/$name.ini" "$dir" "$data" "$2" "$3" "$4" 1024 8 13 "peak_gflops = $((datasheet * 1000))"
  run_timed "$limit" "$GPU_BIN/pipelane" train --config "$WORK/$name.ini" --train.precision=bf16 "${@:6}"
  if [ $rc -ne 0 ] || [ ! -f "$dir/summary.json" ]; then
    stage "$name" error $((SECONDS - t0)) "pipelane train failed (rc $rc$([ $rc -eq 124 ] && echo ": past its $limit s limit"))" "$(tail_text "$output")"
    return
  fi
  local summary tps fpt mfu
  summary=$(tr -d '\n' <"$dir/summary.json")
  tps=$(sed -n 's/.*"tokens_per_s": *\([0-9.e+-]*\).*/\1/p' <<<"$summary" | head -n 1)
  fpt=$(sed -n 's/.*"flops_per_token": *\([0-9.e+-]*\).*/\1/p' <<<"$summary" | head -n 1)
  mfu=$(awk -v t="${tps:-0}" -v f="${fpt:-0}" -v d="$datasheet" -v b="${bf16_peak:-0}" 'BEGIN {
    a = t * f / 1e12;
    printf "{\"tokens_per_s\": %s, \"flops_per_token\": %s, \"achieved_tflops\": %.2f, \"mfu_vs_datasheet_bf16\": %.4f, \"mfu_vs_measured_bf16_gemm\": %.4f}",
      t, f, a, a / d, (b > 0 ? a / b : 0) }')
  stage "$name" ok $((SECONDS - t0)) "bf16 compute${6:+ $6}; 13 steps of 8 x 1024 tokens" "$mfu"
}
t0=$SECONDS
if ! timeout 15 "$tool" make-data "$data" 150000 50257 >>"$log" 2>&1; then
  data_ok=false
  stage mfu_350m error $((SECONDS - t0)) "gpu_check_tool make-data failed (log)"
fi
if $data_ok; then
  mfu_stage mfu_350m 24 1024 16 70
  mfu_stage mfu_1p3b 24 2048 16 100
else
  stage mfu_1p3b error 0 "no data (make-data failed)"
fi

# cuDNN's fused attention only where its bf16 engine matched the CPU at the size trained here.
t0=$SECONDS
run_timed 15 "$GPU_BIN/test_cuda_gpu" --gtest_filter='CudnnAttention.Bf16ComputeAtHeadSize64*'
gate=$(gtest_status "$rc" "$output")
if [ "$gate" != pass ]; then
  stage mfu_350m_cudnn skipped $((SECONDS - t0)) "cuDNN bf16 attention at head size 64: $gate ($(gtest_summary "$output"))"
elif $data_ok; then
  mfu_stage mfu_350m_cudnn 24 1024 16 70 --model.attention=cudnn
else
  stage mfu_350m_cudnn error 0 "no data (make-data failed)"
fi

# Lane overhead: the GPT of command 1's lanes stage with a GEMM lane at training's priority, at
# the least priority and in a 16-SM partition; off again here, so the comparison is one machine's.
t0=$SECONDS
lanes_data="{"
for mode in off equal low partition:16; do
  run_timed $([ $mode = off ] && echo 10 || echo 30) "$tool" lanes "$mode" 6
  line=$(last_json_line "$output")
  [ -n "$line" ] || line=$(json_string "$(tail_text "$output" 3)")
  lanes_data+="$([ "$lanes_data" = "{" ] || echo ,)\"$mode\": $line"
done
lanes_data+="}"
status=ok
grep -q '"status":"ok"' <<<"$lanes_data" || status=error
stage lanes_overhead "$status" $((SECONDS - t0)) "median step per mode; overhead = mode / off - 1" "$lanes_data"

# The simulator's interference parameter, measured: training's probe kernels (a GEMM, an
# element-wise add) on the greatest-priority stream with a lane kernel (a GEMM, an add over 256
# MiB) resident on the least-priority one, against the same probes alone (lane_block_probe.h).
run_stage lane_block "$tool" lane-block 60
line=$(last_json_line "$output")
stage lane_block "$(json_status "$line")" "$elapsed" \
  "probe kernels alone vs with a lane kernel resident, per lane kind; kernel_block_ms = 2 x the medians' difference (scripts/repro/freeride.sh --gpu-report)" \
  "${line:-$(tail_text "$output")}"

run_stage pool_quota "$tool" pool-quota
line=$(last_json_line "$output")
stage pool_quota "$(json_status "$line")" "$elapsed" \
  "a lane arena past its quota and a pool past its maxSize are refused (ArenaQuotaError)" "${line:-$(tail_text "$output")}"
finish
