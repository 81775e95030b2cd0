#!/bin/bash
# gpu_rows16_ncu.sh FINAL BUDGET_S BIN: call 83, where a 16-row round's projections wait. Nsight Compute (memory
# workload, speed of light, warp states) on the first four 16-row stream launches (nt2_s4_m2: one DeltaNet layer's
# qkv/z/b/a, out, gate/up and down, told apart by grid size) and on four 1-row `_w8` launches with source counters.
# The question: is the 16-row kernel bound by L2 reads of x (8 rows × the matrix's columns per block, 3.5× the
# weight bytes on gate/up) rather than by memory or the tensor pipe?
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
ncu_launches ncu-16 project_stream_a4_g2_bf16_nt2_s4_m2 0 4 "$BIN" /dev/shm/s27m4 SpeedOfLight \
  MemoryWorkloadAnalysis MemoryWorkloadAnalysis_Tables WarpStateStats Occupancy LaunchStats
grep -E "Hit Rate|Mem Busy|Max Bandwidth|Grid Size|Duration|L2 Cache Throughput|DRAM Throughput" "$OUT/ncu-16.log" | head -60
ncu_launches ncu-1 project_stream_a4_g2_bf16_nt1_s4_m1_w8 20 4 "$BIN" /dev/shm/s27m4 SpeedOfLight \
  MemoryWorkloadAnalysis WarpStateStats SourceCounters Occupancy LaunchStats
grep -E "Hit Rate|Mem Busy|Max Bandwidth|Grid Size|Duration|L2 Cache Throughput|DRAM Throughput" "$OUT/ncu-1.log" | head -60
rm -rf /dev/shm/s27m4
finish "$FINAL"
