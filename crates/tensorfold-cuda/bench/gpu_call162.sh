#!/bin/bash
# gpu_call162.sh FINAL BUDGET_S BIN: the issue's table for the 9B shapes with the same binary as call 161 (call 143's
# sweeps and the transformers peer on 9B bf16); then Nsight Compute on the two launches a 27B MLX4 16-row round adds
# most time to: the 4-bit wgmma projection `project_wgmma_a4_g2_bf16` (9 to 16 rows; its first launches are the
# 16-row round's: decode takes the stream kernels, the 64-token prefills the 64-column build) and the DeltaNet chain
# `dn_recur_batch_v2` (the 64-token prefills of the bench's four decodes and of its rounds come first: 5 × 48
# launches, so launches 241 and 242 should be the 16-row round's; the log's grid and duration tell).
FINAL=${1:?out dir}; BUDGET=${2:-330}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
sweep() {  # sweep NAME MODEL PREFILL_LENS
  step "$1" 120 "$BIN" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens "$3"
  grep -E "^\||copy|weights read" "$OUT/$1.log" | cut -c1-120 | sed "s/^/$1 /"
}
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out /dev/shm/s9m4
sweep sweep-9b-mlx4 /dev/shm/s9m4 2048,16384
rm -rf /dev/shm/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
sweep sweep-9b-bf16 /dev/shm/s9b 2048,16384
step peer-9b-bf16 90 python3 "$(dirname "$0")/peer_transformers.py" /dev/shm/s9b 32
grep -E "^\||peer load" "$OUT/peer-9b-bf16.log" | sed "s/^/peer-9b-bf16 /"
rm -rf /dev/shm/s9b
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
ncu_launches ncu-wg16 project_wgmma_a4_g2_bf16 0 2 "$BIN" $M SpeedOfLight WarpStateStats SchedulerStats \
  ComputeWorkloadAnalysis Occupancy LaunchStats
ncu_launches ncu-dn16 dn_recur_batch_v2 240 2 "$BIN" $M SpeedOfLight WarpStateStats SchedulerStats LaunchStats
rm -rf $M
finish "$FINAL"
