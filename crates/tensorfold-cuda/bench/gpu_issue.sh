#!/bin/bash
# gpu_issue.sh FINAL BUDGET_S NEW OLD: on the GPU machine, one call: backend-ops and every equality suite with NEW,
# then quick runs on the 27B MLX 4-bit shape alternating OLD and NEW (twice), NEW with two output tiles per block
# at every row count (TENSORFOLD_CUDA_MMA_STAGES=2), and Nsight Compute's warp-state and scheduler sections for
# NEW's 1-row gate/up pair and 16-row down projection (where the stream kernel's cycles go).
FINAL=${1:?out dir}; BUDGET=${2:-480}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-old-$i /tmp/s27m4 "$OLD"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
done
quick 27b-new-m2 /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_STAGES=2
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
if [ -n "$NCU" ]; then
  for k in "project_stream_a4_g2_bf16_nt1_s4_m1" "project_stream_a4_g2_bf16_nt2_s4_m2"; do
    step ncu-$k 90 "$NCU" --kernel-name "$k" --launch-skip 40 --launch-count 2 --section SpeedOfLight \
      --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
    grep -E "Duration|Throughput|stalled|Issue|Eligible|Active Warps|Occupancy|Registers|Warp Cycles|No Eligible|One or More" "$OUT/ncu-$k.log" | head -80
  done
fi
rm -rf /tmp/s27m4
finish "$FINAL"
