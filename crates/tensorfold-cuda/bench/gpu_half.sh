#!/bin/bash
# gpu_half.sh FINAL BUDGET_S NEW OLD: call 80, the weight stream's 1-tile loop unrolled with 8 warps fixed (`_w8`)
# and half tiles for launches of up to 512 tiles (`_w8_h`), against main (OLD): every check and the tiny fixtures'
# shas with NEW; 27B MLX4 quick benches alternating, NEW also without half tiles (TENSORFOLD_CUDA_HALF_TILES=0);
# the decode profile each way; Nsight Compute on the 1-row down projection each way; 9B MLX4 quick benches. Half
# tiles left main after call 80: this script needs bench/logs/call80/half_tiles.patch applied.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?binary}; OLD=${4:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
all_checks "$NEW"
tiny_shas "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-old-1 /dev/shm/s27m4 "$OLD"
quick q-new-1 /dev/shm/s27m4 "$NEW"
quick q-whole-1 /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_HALF_TILES=0
quick q-old-2 /dev/shm/s27m4 "$OLD"
quick q-new-2 /dev/shm/s27m4 "$NEW"
quick q-whole-2 /dev/shm/s27m4 "$NEW" TENSORFOLD_CUDA_HALF_TILES=0
for v in old new whole; do
  b=$([ $v = old ] && echo "$OLD" || echo "$NEW")
  step prof-$v 40 env TENSORFOLD_CUDA_HALF_TILES=$([ $v = whole ] && echo 0 || echo 512) TENSORFOLD_CUDA_PROFILE=1 \
    "$b" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
  sed -n '/profile of 8 decode rounds/,/^launches/p' "$OUT/prof-$v.log" | head -14 | sed "s/^/prof-$v /"
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
# The 1-row down projection (the only 5120-output launch of 17,408 columns): its kernel differs by version.
for v in old new; do
  b=$([ $v = old ] && echo "$OLD" || echo "$NEW")
  k=project_stream_a4_g2_bf16_nt1_s4_m1$([ $v = new ] && echo _w8_h)
  step ncu-$v 60 "$NCU" --kernel-name $k --launch-skip 20 --launch-count 3 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    "$b" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  grep -E "Duration|DRAM Throughput|Issued Warp|Achieved Active|Grid Size|Registers Per|Warp Cycles Per Issued" "$OUT/ncu-$v.log" | head -30 | sed "s/^/ncu-$v /"
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
quick n-old /dev/shm/s9m4 "$OLD"
quick n-new /dev/shm/s9m4 "$NEW"
quick n-whole /dev/shm/s9m4 "$NEW" TENSORFOLD_CUDA_HALF_TILES=0
rm -rf /dev/shm/s9m4
finish "$FINAL"
