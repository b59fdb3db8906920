#!/usr/bin/env bash
# The GPU check, command 1 of 2 (scripts/gpu/README.md): does the CUDA backend work at all?
# Environment, the library loading, op parity fp32/bf16 against the CPU backend, cuDNN's fused
# attention, training parity with the CPU, lanes on/off bit-identical. Most valuable first: a run
# cut short has already answered whether anything runs. Without a GPU (the rehearsal here) every
# stage after library_load says "skipped: no GPU".
#   bash scripts/gpu/command1.sh        (after scripts/gpu_bundle.sh; $OUT gets report.json and gpu.log)
GPU_COMMAND=command1
# Each stage's limit, about 3x its expected time; the sum must stay under 540 s (one command has
# 600 s): tests/scripts/test_gpu_stages.sh checks it.
declare -A STAGE_TIMEOUTS=(
  [environment]=60      # unpack 20, ldconfig 2 x 5, python3 15 (the wheels), nvidia-smi 15
  [library_load]=30     # pipelane devices 20, one ldd over the binaries 10
  [device]=20
  [op_parity_fp32]=100
  [op_parity_bf16]=60
  [cudnn_attention]=55
  [train_parity]=60
  [lanes_bit_identical]=70  # lanes off + low priority, 35 each
  [lanes_train]=75          # make-data 15, pipelane train lanes off + prefill, 30 each
)
source "$(dirname "$0")/lib.sh"

t0=$SECONDS
env_status=ok
if [ -z "${GPU_BIN_OVERRIDE:-}" ] && ! unpack_bundle 20 >>"$log" 2>&1; then env_status=error; fi
environment_setup
detect_gpu
stage environment "$env_status" $((SECONDS - t0)) "$(uname -m), $(nproc) cores; GPU: $gpu_note; $libs_note"
[ "$env_status" = ok ] || finish

library_load_stage || { skip_gpu_stages device op_parity_fp32 op_parity_bf16 cudnn_attention train_parity lanes_bit_identical lanes_train; finish; }
if ! $have_gpu; then
  skip_gpu_stages device op_parity_fp32 op_parity_bf16 cudnn_attention train_parity lanes_bit_identical lanes_train
  finish
fi

tool=$GPU_BIN/gpu_check_tool
run_stage device "$tool" env
line=$(last_json_line "$output")
stage device "$([ "$(json_status "$line")" = ok ] && echo ok || echo error)" "$elapsed" \
  "device, priorities, versions" "${line:-$(tail_text "$output")}"

gtest_stage op_parity_fp32 "every op of the op table on the CUDA backend (cuBLASLt) vs the double reference and the CPU backend" \
  "$GPU_BIN/test_backend_ops" --gtest_filter='*/cuda'
gtest_stage op_parity_bf16 "bf16 storage ops and bf16 compute through cuBLASLt vs the CPU backend" \
  "$GPU_BIN/test_cuda_gpu" --gtest_filter='-CudnnAttention*'
gtest_stage cudnn_attention "cuDNN fused causal attention vs the CPU backend: fp32 and bf16 at odd sizes, bf16 at head size 64 (the MFU stage's gate)" \
  "$GPU_BIN/test_cuda_gpu" --gtest_filter='CudnnAttention*'

run_stage train_parity "$tool" train-parity
line=$(last_json_line "$output")
stage train_parity "$(json_status "$line")" "$elapsed" \
  "tiny GPT, 5 steps: CUDA vs CPU within 1e-5 relative; bf16 compute within 0.05 of the CPU's fp32 losses" \
  "${line:-$(tail_text "$output")}"

# Lanes at the least priority next to training: the losses must not change by one bit.
t0=$SECONDS
run_timed 35 "$tool" lanes off 6
off=$(last_json_line "$output")
run_timed 35 "$tool" lanes low 6
low=$(last_json_line "$output")
off_losses=$(sed -n 's/.*"loss":\(\[[^]]*\]\).*/\1/p' <<<"$off")
low_losses=$(sed -n 's/.*"loss":\(\[[^]]*\]\).*/\1/p' <<<"$low")
status=fail
[ -n "$off_losses" ] && [ "$off_losses" = "$low_losses" ] && status=pass
stage lanes_bit_identical "$status" $((SECONDS - t0)) "8 x 1024 GPT, 6 steps, with a GEMM lane at the least priority vs none: losses bit for bit" \
  "{\"off\": ${off:-null}, \"low\": ${low:-null}}"

# pipelane train itself, with the prefill lane (a device lane) against lanes off.
data=$WORK/synthetic.h5
t0=$SECONDS
timeout 15 "$tool" make-data "$data" 60000 50257 >>"$log" 2>&1 || echo "make-data failed" >>"$log"
losses_of() { sed -n 's/.*"loss": *\([-0-9.e+]*\).*/\1/p' "$1/metrics.jsonl" 2>/dev/null | tr '\n' ' '; }
for mode in off prefill; do
  dir=$WORK/lanes_train_$mode
  rm -rf "$dir"
  extra=()
  [ $mode = prefill ] && extra=(--lanes.enabled=prefill --lanes.profile_iterations=2)
  write_train_ini "$WORK/lanes_train.ini" "$dir" "$data" 4 512 8 512 4 12
  run_timed 30 "$GPU_BIN/pipelane" train --config "$WORK/lanes_train.ini" "${extra[@]}"
  eval "rc_$mode=$rc"
done
off_l=$(losses_of "$WORK/lanes_train_off")
on_l=$(losses_of "$WORK/lanes_train_prefill")
status=fail
[ "$rc_off" -eq 0 ] && [ "$rc_prefill" -eq 0 ] && [ -n "$off_l" ] && [ "$off_l" = "$on_l" ] && status=pass
stage lanes_train "$status" $((SECONDS - t0)) "pipelane train on the GPU, prefill lane vs lanes off: losses bit for bit (rc $rc_off / $rc_prefill)" \
  "{\"off_losses\": \"$off_l\", \"prefill_losses\": \"$on_l\"}"
finish
