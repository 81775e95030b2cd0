#!/bin/bash
# gpu_wgmma_ncu.sh FINAL BUDGET_S BIN: (call 101) Nsight Compute on the wgmma kernel and on the decode kernels of 16-row rounds.
FINAL=${1:?}; BUDGET=${2:-200}; BIN=${3:?}
. crates/tensorfold-cuda/bench/steps.sh
mkdir -p "$FINAL"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
export TENSORFOLD_CUDA_WGMMA=1
ncu_launches ncu-wg project_wgmma_a4_g2_bf16 0 3 "$BIN" /dev/shm/s27m4 SpeedOfLight SchedulerStats WarpStateStats Occupancy
unset TENSORFOLD_CUDA_WGMMA
ncu_launches ncu-mma16 regex:project_stream_a4_g2_bf16_nt4 0 3 "$BIN" /dev/shm/s27m4 SpeedOfLight SchedulerStats WarpStateStats
rm -rf /dev/shm/s27m4
finish "$FINAL"
