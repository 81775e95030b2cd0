#!/bin/bash
# gpu_call184.sh FINAL BUDGET_S BIN: the SwiGLU stored by the gate and up launch (TENSORFOLD_CUDA_SWIGLU_TAIL=1,
# project_many.rs project_swiglu) against the swiglu launch (main): backend-ops (its pairs group checks the tail bit
# for bit against project_pair then swiglu) and two fixtures' full suites with the tail on, then quick benches of
# the 27B and 9B MLX4 shapes, main and tail in turn, three times each (the decode shas must agree). One kernel image
# (the tail is chosen by the host).
FINAL=${1:?out dir}; BUDGET=${2:-200}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
first_check "$BIN"
TAIL="TENSORFOLD_CUDA_SWIGLU_TAIL=1"
image_checks tail "$BIN" "$TAIL"
M=/dev/shm/m27; M9=/dev/shm/m9
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
variants m4 $M 3 main=TF_MAIN=1 tail=$TAIL
rm -rf $M
step synth-9b-mlx4 30 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
variants m9 $M9 3 main=TF_MAIN=1 tail=$TAIL
rm -rf $M9
finish "$FINAL"
