#!/bin/bash
# gpu_call164.sh FINAL BUDGET_S BIN: Nsight Compute on the launches the targets depend on, never profiled with
# counters before: the bf16 and 4-bit prompt GEMMs (gate, up and down of a 2048-row chunk), the 16-row 4-bit round's
# gate/up and down, the 16-row round's DeltaNet chain. Checkpoints of the 27B shapes with 4 layers (the matrices
# are the real ones; fewer of them). Which launch is which: by the order of `bench --quick` (see each step).
FINAL=${1:?out dir}; BUDGET=${2:-240}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1; cat "$OUT/env.log"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
# `prof NAME KERNEL SKIP COUNT MODEL PREFILL`: ncu on COUNT launches of KERNEL (exact name) after SKIP.
prof() {
  local name=$1 kernel=$2 skip=$3 count=$4 model=$5 pl=$6
  step "$name" 30 "$NCU" --clock-control none --kernel-name "$kernel" --launch-skip "$skip" --launch-count "$count" \
    $SECTIONS "$BIN" bench --device cuda --model "$model" --decode-tokens 4 --repeat 1 --quick --prefill-lens "$pl"
  grep -E "^  [a-z_0-9]+.*\(|Duration|Memory Throughput|L2 Cache Throughput|DRAM Throughput|L1/TEX Cache|Compute \(SM\)|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued" \
    "$OUT/$name.log" | head -60 | sed "s/^/$name /"
}
B=/dev/shm/s27bf4
step synth-bf 60 "$BIN" synth --shape 27b --format bf16 --layers 4 --threads 16 --out $B
# Prompt launches of a 2048-row chunk, layer 0 (DeltaNet): qkv, z, b, a, out, gate, up, down: gate, up, down.
prof gemm-bf project_wgmma_gemm_bf16_w3 5 3 $B 2048
rm -rf $B
M=/dev/shm/s27m4l4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --layers 4 --out $M
prof gemm-m4 project_wgmma_gemm_a4_g2_bf16_w3 5 3 $M 2048
# The 16-row round's launches of this name: qkvz+b+a, then gate+up (layer 0; 64-row prompt chunks take _n64).
prof r16-gateup project_wgmma_a4_g2_bf16 1 1 $M 64
# _m1 16-row launches: out (5120x6144) then down (5120x17408) of layer 0.
prof r16-down project_wgmma_a4_g2_bf16_m1 1 1 $M 64
# DeltaNet chains: 5 prompt chunks of 64 rows (4 decode modes, the rounds' prompt) x 3 DeltaNet layers, then rounds
# of 1 row (dn_recur_v2), then of 16 rows.
prof dn16 dn_recur_batch_v2 15 3 $M 64
rm -rf $M
finish "$FINAL"
