#!/bin/bash
# gpu_w8b5.sh FINAL BUDGET_S BIN: (not run yet: the session that wrote it had no device time left) the final binary (1-row `_w8` kernels built for 5 blocks an SM) against
# the same kernels built for 4 (-DTF_W8_BLOCKS=4, main's) and 6: 27B MLX4 and 9B MLX4 quick benches alternating,
# then backend-ops, every fixture's suite and the tiny shas with the default build while the budget lasts.
FINAL=${1:?out dir}; BUDGET=${2:-250}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  quick q4-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=4"
  quick q5-$r /dev/shm/s27m4 "$BIN"
  quick q6-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=6"
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for r in 1 2; do
  quick n4-$r /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_DEFINES="-DTF_W8_BLOCKS=4"
  quick n5-$r /dev/shm/s9m4 "$BIN"
done
rm -rf /dev/shm/s9m4
all_checks "$BIN"
tiny_shas "$BIN"
finish "$FINAL"
