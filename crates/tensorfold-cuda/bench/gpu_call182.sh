#!/bin/bash
# gpu_call182.sh FINAL BUDGET_S BIN: the 4-bit weight stream's copies past a warp's last group zero-filled instead
# of read (TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_ZFILL: nothing fetched for stages never read, and the block's last
# wait no longer waits on memory; only the 72 project_stream_a4_* functions' SASS differs, the 27B's decode kernel
# keeps 48 registers), and the L2 look-ahead off (TENSORFOLD_CUDA_L2_AHEAD_KB=0) for its reading on whichever GPU
# comes; against main (look-ahead on, 8 MiB), in turn, three times each, on 27B and 9B MLX4. Precompile both images
# into the carried cache. Backend-ops and two fixtures' full suites on the switch image first.
FINAL=${1:?out dir}; BUDGET=${2:-240}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
first_check "$BIN"
ZF="TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_ZFILL"
image_checks zfill "$BIN" "$ZF"
M=/dev/shm/m27; M9=/dev/shm/m9
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
alternate_images m4 $M 3 "$BIN" zfill "$ZF" ahead0 TENSORFOLD_CUDA_L2_AHEAD_KB=0
rm -rf $M
step synth-9b-mlx4 30 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
alternate_images m9 $M9 3 "$BIN" zfill "$ZF" ahead0 TENSORFOLD_CUDA_L2_AHEAD_KB=0
rm -rf $M9
finish "$FINAL"
