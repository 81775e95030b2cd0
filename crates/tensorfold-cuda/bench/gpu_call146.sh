#!/bin/bash
# gpu_call146.sh FINAL BUDGET_S BIN: (call 146) Nsight Compute on the launches a 16-row 27B MLX4 round adds time to
# (BENCHMARKS.md §7: add_rms_norm 11.7 against 8.2 µs a launch, the DeltaNet chain 21.3 against 7.6): each kernel's
# first launch in `run` of a 16-token prompt (a 16-row chain: round kernels, wgmma B tiles) and of a 1-token one,
# with the speed-of-light, occupancy, scheduler and warp-state sections and the stall reasons per issued instruction.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
STALLS=$(for s in short_scoreboard long_scoreboard barrier membar wait math_pipe_throttle mio_throttle lg_throttle \
  no_instruction branch_resolving dispatch_stall drain not_selected selected; do
  printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' $s; done)
nsight() {  # nsight NAME KERNEL PROMPT_IDS [SKIP]
  step "$1" 80 "$NCU" --kernel-name "$2" --launch-skip "${4:-0}" --launch-count 1 --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section SchedulerStats --section WarpStateStats --metrics "${STALLS%,}" \
    "$BIN" run --device cuda --model $M --prompt-ids "$3" --max-tokens 2 --ignore-eos
  grep -E "Duration|Throughput|Issued Ipc|Issue Slots|Eligible|Active Warps Per|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|Block Size|stalled" \
    "$OUT/$1.log" | sed "s/^/$1 /"
}
P16=$(seq -s, 1 16)
# `run` first times a round of the widest chunk (65 rows here): 127 add_rms_norm, 48 chain and 64 swiglu launches,
# skipped by SKIP in the second call (call 147); call 146 measured those warm-up launches but for recur-1.
if [ -n "$SKIP_WARMUP" ]; then
  nsight norm-16 add_rms_norm "$P16" 127
  nsight norm-1 add_rms_norm 1 127
  nsight chain-16 dn_recur_batch_v2 "$P16" 48
  nsight swiglu-16 swiglu "$P16" 64
  nsight swiglu-1 swiglu 1 64
else
  nsight norm-16 add_rms_norm "$P16"
  nsight norm-1 add_rms_norm 1
  nsight chain-16 dn_recur_batch_v2 "$P16"
  nsight recur-1 dn_recur_v2 1
  nsight swiglu-16 swiglu "$P16"
  nsight swiglu-1 swiglu 1
fi
rm -rf $M
finish "$FINAL"
