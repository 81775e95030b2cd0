#!/bin/bash
# gpu_unroll.sh FINAL BUDGET_S NEW OLD: call 79, project_stream's loop unrolled by its stage count (stage addresses
# known at compile time, pointers stepped by unsigned counts, 64 registers asked for; `_w8` kernels with 8 warps
# fixed, and without them: TENSORFOLD_CUDA_FIXED_WARPS=0) against main's loop (OLD):
# every check and the tiny fixtures' shas with NEW; 27B MLX4 quick benches alternating; the decode profile each
# way; Nsight Compute on the 1-row gate/up launch each way; 9B MLX4 quick benches each way.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?binary}; OLD=${4:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
all_checks "$NEW"
tiny_shas "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-old-1 /dev/shm/s27m4 "$OLD"
quick q-new-1 /dev/shm/s27m4 "$NEW"
quick q-old-2 /dev/shm/s27m4 "$OLD"
quick q-new-2 /dev/shm/s27m4 "$NEW"
quick q-runtime-warps /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_FIXED_WARPS=0
for v in old new; do
  b=$([ $v = old ] && echo "$OLD" || echo "$NEW")
  step prof-$v 40 env TENSORFOLD_CUDA_PROFILE=1 "$b" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 \
    --repeat 1 --quick --prefill-lens 2048
  sed -n '/profile of 8 decode rounds/,/^launches/p' "$OUT/prof-$v.log" | head -14 | sed "s/^/prof-$v /"
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
for v in old new; do
  b=$([ $v = old ] && echo "$OLD" || echo "$NEW")
  k=project_stream_a4_g2_bf16_nt1_s4_m1$([ $v = new ] && echo _w8)
  step ncu-$v 60 "$NCU" --kernel-name $k --launch-skip 40 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    "$b" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  grep -E "Duration|Throughput|Issue|Eligible|Active Warps|Registers|Warp Cycles|Block Limit|Stall|stall|Grid Size|Block Size" "$OUT/ncu-$v.log" | head -40 | sed "s/^/ncu-$v /"
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
quick n-old /dev/shm/s9m4 "$OLD"
quick n-new /dev/shm/s9m4 "$NEW"
rm -rf /dev/shm/s9m4
finish "$FINAL"
