#!/bin/bash
# gpu_call182.sh FINAL BUDGET_S BIN: three untimed variants against main (the L2 look-ahead on, 8 MiB), in turn:
# - zfill: the 4-bit weight stream's copies past a warp's last group zero-filled instead of read
#   (TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_ZFILL: nothing fetched for stages never read, and the block's last wait no
#   longer waits on memory; only the 72 project_stream_a4_* functions' SASS differs, the 27B decode kernel keeps
#   48 registers);
# - wgahead: the wgmma round kernels (5 to 64 rows) ask L2 ahead too (TENSORFOLD_CUDA_L2_AHEAD_ROUNDS=1, which
#   builds them with -DTF_WG_AHEAD): 16-row rounds;
# - ahead0: the look-ahead off (TENSORFOLD_CUDA_L2_AHEAD_KB=0), its reading on whichever GPU comes.
# 27B and 9B MLX4 three times each, then 27B bf16 (main and wgahead) twice. Precompile the three images into the
# carried cache: the precompile example plain, with TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_ZFILL, and with
# TENSORFOLD_CUDA_L2_AHEAD_ROUNDS=1 (nvrtc.rs adds -DTF_WG_AHEAD from it).
# Backend-ops and two fixtures' full suites on the zfill and wgahead images first.
FINAL=${1:?out dir}; BUDGET=${2:-330}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
first_check "$BIN"
ZF="TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_ZFILL"
WG="TENSORFOLD_CUDA_L2_AHEAD_ROUNDS=1"
image_checks zfill "$BIN" "$ZF"
image_checks wgahead "$BIN" "$WG"
M=/dev/shm/m27; M9=/dev/shm/m9; BF=/dev/shm/bf27
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
variants m4 $M 3 main=TF_MAIN=1 zfill=$ZF wgahead=$WG ahead0=TENSORFOLD_CUDA_L2_AHEAD_KB=0
rm -rf $M
step synth-9b-mlx4 30 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
variants m9 $M9 3 main=TF_MAIN=1 zfill=$ZF wgahead=$WG ahead0=TENSORFOLD_CUDA_L2_AHEAD_KB=0
rm -rf $M9
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
variants bf $BF 2 main=TF_MAIN=1 wgahead=$WG
rm -rf $BF
finish "$FINAL"
