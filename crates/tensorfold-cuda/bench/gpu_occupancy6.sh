#!/bin/bash
# gpu_occupancy6.sh FINAL BUDGET_S BIN: call 86, the 1-row weight stream (`_w8`, one row tile) built for 5 or 6 blocks
# an SM instead of 4 (project_stream.cu TF_W8_BLOCKS through TENSORFOLD_CUDA_DEFINES; ptxas fits its loop in 48
# and 40 registers with no spill). Each: backend-ops and tiny-mlx-4bit's quick suite, 27B MLX4 quick benches
# alternating, Nsight on one 1-row gate/up and one down launch, the 9B MLX4 quick bench.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
for v in 5 6; do
  step check-b$v 60 env TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=$v" "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  echo "check-b$v: $(grep -E '^backend-ops|cases,' "$OUT/check-b$v.log" | tr '\n' ' ')"
done
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2 3; do
  quick q4-$r /dev/shm/s27m4 "$BIN"
  quick q5-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=5"
  quick q6-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=6"
done
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
for v in 4 5 6; do
  d="-DTF_W8_BLOCKS=$v"; [ $v = 4 ] && d=""  # 4 is the default build (the cache holds it without defines)
  step ncu-b$v 40 env TENSORFOLD_CUDA_DEFINES="$d" "$ncu" --kernel-name project_stream_a4_g2_bf16_nt1_s4_m1_w8 \
    --launch-skip 20 --launch-count 4 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  grep -E "Duration|DRAM Throughput|Achieved Active Warps|Issued Instruction" "$OUT/ncu-b$v.log" | sed "s/^/ncu-b$v /"
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for r in 1 2; do
  quick n4-$r /dev/shm/s9m4 "$BIN"
  quick n5-$r /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=5"
  quick n6-$r /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=6"
done
rm -rf /dev/shm/s9m4
finish "$FINAL"
