#!/bin/bash
# gpu_call179.sh FINAL BUDGET_S BIN: the L2 look-ahead (src/ahead.rs, common.cu l2_ahead): each decode projection's
# last blocks ask L2 for the first bytes of the projection that followed it last round, so they load while the small
# kernels in between leave memory idle. A runtime switch of one kernel image (TENSORFOLD_CUDA_L2_AHEAD_KB, 0 = off,
# the default; TENSORFOLD_CUDA_L2_AHEAD_BLOCKS, 132): bits checked with it on, then quick benches (decode, 1- and
# 16-row rounds, a 2k prefill; best of 2) of off and several sizes in turn on 27B MLX4, 9B MLX4 and 27B bf16.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
image_checks ahead "$BIN" TENSORFOLD_CUDA_L2_AHEAD_KB=8192
K=TENSORFOLD_CUDA_L2_AHEAD_KB
M=/dev/shm/m27; M9=/dev/shm/m9; BF=/dev/shm/bf27
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
variants m4 $M 3 off=$K=0 k2=$K=2048 k8=$K=8192 k32=$K=32768 "k8b264=$K=8192 TENSORFOLD_CUDA_L2_AHEAD_BLOCKS=264"
rm -rf $M
step synth-9b-mlx4 30 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
variants m9 $M9 3 off=$K=0 k2=$K=2048 k8=$K=8192
rm -rf $M9
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
variants bf $BF 2 off=$K=0 k8=$K=8192 k32=$K=32768
rm -rf $BF
finish "$FINAL"
