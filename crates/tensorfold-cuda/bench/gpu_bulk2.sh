#!/bin/bash
# gpu_bulk2.sh FINAL BUDGET_S BIN: call 78, project_bulk with a producer warp (full and empty barriers per stage, no
# block barrier per round) against project_stream.cu's per-lane copies (TENSORFOLD_CUDA_BULK=0), same binary: every
# check and the tiny fixtures' shas; 27B MLX4 quick benches in turn at ring depths 3, 4, 6 and 8; the decode
# profile each way; Nsight Compute on the 1-row gate/up launch each way; 9B MLX4 quick benches each way.
# Needs bench/logs/call78/project_bulk.patch applied (the kernel and its switches left main after call 78).
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
all_checks "$BIN"
tiny_shas "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-stream-1 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK=0
quick q-bulk8 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK=1
quick q-bulk4 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK=1 TENSORFOLD_CUDA_BULK_STAGES=4
quick q-bulk3 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK=1 TENSORFOLD_CUDA_BULK_STAGES=3
quick q-bulk6 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK=1 TENSORFOLD_CUDA_BULK_STAGES=6
quick q-stream-2 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK=0
for v in stream bulk; do
  e=TENSORFOLD_CUDA_BULK=$([ $v = stream ] && echo 0 || echo 1)
  step prof-$v 40 env $e TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 \
    --repeat 1 --quick --prefill-lens 2048
  sed -n '/profile of 8 decode rounds/,/^launches/p' "$OUT/prof-$v.log" | head -10 | sed "s/^/prof-$v /"
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
for k in project_stream_a4_g2_bf16_nt1_s4_m1 project_bulk_a4_g2_bf16_nt1; do
  e=TENSORFOLD_CUDA_BULK=$([ ${k#project_stream} != $k ] && echo 0 || echo 1)
  step ncu-$k 60 env $e "$NCU" --kernel-name "$k" --launch-skip 40 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section Occupancy \
    "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  grep -E "Duration|Throughput|Issue|Eligible|Active Warps|Registers|Warp Cycles|Block Limit|Stall|stall" "$OUT/ncu-$k.log" | head -40 | sed "s/^/ncu-$k /"
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
quick n-stream /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_BULK=0
quick n-bulk /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_BULK=1
rm -rf /dev/shm/s9m4
finish "$FINAL"
