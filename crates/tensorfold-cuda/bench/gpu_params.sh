#!/bin/bash
# gpu_params.sh FINAL BUDGET_S BIN: call 85, where the 4-bit stream's scales and biases travel (project_stream.cu
# TF_PARAMS, set through TENSORFOLD_CUDA_DEFINES; the cache carries each variant's cubin): 0 = 16-byte cp.async by 4
# lanes (main), 1 = 4-byte cp.async by 16 lanes, 2 = global loads into registers 1 group ahead, 2a2 = 2 groups ahead.
# Call 84 found main's copy costing 16 shared-memory wavefronts a group, 57% of the 1-row loop's. Each variant:
# backend-ops and tiny-mlx-4bit's quick suite (the same bits), then 27B MLX4 quick benches alternating, Nsight on
# one 1-row gate/up launch each, the 9B MLX4 quick bench each.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
D1="-DTF_PARAMS=1"; D2="-DTF_PARAMS=2"; D3="-DTF_PARAMS=2 -DTF_PARAMS_AHEAD=2"
for v in 1 2 3; do
  eval d=\$D$v
  step check-v$v 60 env TENSORFOLD_CUDA_DEFINES="$d" "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  echo "check-v$v: $(grep -E '^backend-ops|cases,' "$OUT/check-v$v.log" | tr '\n' ' ')"
done
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  quick q0-$r /dev/shm/s27m4 "$BIN"
  quick q1-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="$D1"
  quick q2-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="$D2"
  quick q3-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="$D3"
done
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
for v in 0 1 2; do
  eval d=\${D$v:-}
  step ncu-v$v 40 env TENSORFOLD_CUDA_DEFINES="$d" "$ncu" --kernel-name project_stream_a4_g2_bf16_nt1_s4_m1_w8 \
    --launch-skip 23 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum \
    "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  grep -E "Duration|DRAM Throughput|L1/TEX Cache|Issued Instruction|wavefronts_mem_shared|inst_executed" "$OUT/ncu-v$v.log" | sed "s/^/ncu-v$v /"
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
quick n0 /dev/shm/s9m4 "$BIN"
quick n2 /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_DEFINES="$D2"
quick n1 /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_DEFINES="$D1"
rm -rf /dev/shm/s9m4
finish "$FINAL"
