#!/bin/bash
# gpu_call180.sh FINAL BUDGET_S BIN: the L2 look-ahead's size (TENSORFOLD_CUDA_L2_AHEAD_KB) around call 179's best:
# 8 MB took 27B MLX4 decode 2.7% and 9B MLX4 3% faster on an H100, 32 MB lost (4-bit and bf16). Off, 4, 8, 12 and
# 16 MB in turn, three times each, on 27B and 9B MLX4 (quick benches, best of 2); same binary as call 179.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
K=TENSORFOLD_CUDA_L2_AHEAD_KB
M=/dev/shm/m27; M9=/dev/shm/m9
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
variants m4 $M 3 off=$K=0 k4=$K=4096 k8=$K=8192 k12=$K=12288 k16=$K=16384
rm -rf $M
step synth-9b-mlx4 30 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
variants m9 $M9 3 off=$K=0 k4=$K=4096 k8=$K=8192 k12=$K=12288 k16=$K=16384
rm -rf $M9
finish "$FINAL"
