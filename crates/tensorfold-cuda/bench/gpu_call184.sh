#!/bin/bash
# gpu_call184.sh FINAL BUDGET_S BIN: the final default (the weight stream's copies past a warp's last group
# zero-filled, the SwiGLU tail and the wgmma rounds' look-ahead removed) against the copies that read
# (TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_READ_PAST, the previous default's kernels): backend-ops and tiny-mlx-4bit's
# quick suite first, then quick benches of the 27B MLX4 shape, the two images in turn, three times, then the 9B
# MLX4 shape twice as the budget allows. Both images precompiled into the carried cache.
FINAL=${1:?out dir}; BUDGET=${2:-150}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
first_check "$BIN"
RP="TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_READ_PAST"
M=/dev/shm/m27; M9=/dev/shm/m9
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
variants m4 $M 3 main=TF_MAIN=1 readpast=$RP
rm -rf $M
step synth-9b-mlx4 30 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
variants m9 $M9 2 main=TF_MAIN=1 readpast=$RP
rm -rf $M9
finish "$FINAL"
