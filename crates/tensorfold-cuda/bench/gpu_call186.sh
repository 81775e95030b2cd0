#!/bin/bash
# gpu_call186.sh FINAL BUDGET_S BIN: the issue's whole table with the final binary (gpu_call169.sh's checks, sweeps
# and peers; bf16 prompt chunks now on the wide wgmma GEMM), and two switches that need no other image, each beside
# main in turn: 16-row rounds on the prompt kernels (TENSORFOLD_CUDA_GEMM_ROWS=9: the wgmma prompt GEMM takes every
# call of 9 rows or more; the bits are the same, project_gemm.rs gemm_for) on 27B MLX4 and bf16, and the bf16 prompt
# chunks on the previous default's narrow blocks (TENSORFOLD_CUDA_WGMMA_GEMM=3).
FINAL=${1:?out dir}; BUDGET=${2:-540}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
G16="TENSORFOLD_CUDA_GEMM_ROWS=9"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
sweep sweep-27b-mlx4 $M 2048,16384,32768 "$BIN"
variants m4 $M 2 main=TF_MAIN=1 g16=$G16
rm -rf $M
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
sweep sweep-27b-bf16 /dev/shm/s27b 2048,16384,32768 "$BIN"
variants bf /dev/shm/s27b 2 main=TF_MAIN=1 g16=$G16 narrow=TENSORFOLD_CUDA_WGMMA_GEMM=3
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out /dev/shm/s9m4
sweep sweep-9b-mlx4 /dev/shm/s9m4 2048,16384 "$BIN"
rm -rf /dev/shm/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
sweep sweep-9b-bf16 /dev/shm/s9b 2048,16384 "$BIN"
peer peer-9b-bf16 /dev/shm/s9b
rm -rf /dev/shm/s9b
peer peer-27b-bf16 /dev/shm/s27b
rm -rf /dev/shm/s27b
finish "$FINAL"
