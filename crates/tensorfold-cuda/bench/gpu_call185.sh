#!/bin/bash
# gpu_call185.sh FINAL BUDGET_S BIN: why the bf16 round kernels move fewer bytes a second than the 1-row kernel,
# and what the switches built without a GPU are worth. The checks of main, -DTF_WG_RFAST (split launches' blocks
# with the residues fastest), -DTF_DN_EARLY_STATE (the DeltaNet state read before the wait) and
# TENSORFOLD_CUDA_WGMMA_GEMM=wide (the bf16 prompt GEMM on 128 × 128 blocks); two probes built there with nvcc
# (probe/walk_order.cu, probe/k16_order.cu); quick benches of 27B MLX4 (main, rfast, dnearly; twice, in turn) and
# of the 4-bit round kernel's timing ablations (project_wgmma.cu TF_ABL_*, once each); quick benches of 27B bf16
# (main, rfast, rfast with the gate/up launch split too, wide; twice, in turn) and a 16k prefill (main, wide).
# Seven images precompiled into the carried cache: plain, TENSORFOLD_CUDA_DEFINES=-DTF_WG_RFAST,
# -DTF_DN_EARLY_STATE and -DTF_ABL_NO_DEQUANT, _NO_FOLD, _NO_MMA, _NO_XTILE.
# Ran as call 185 (BENCHMARKS.md §7); the switches were removed after it (27c6a0f), so rerun it from 89d8904.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1; cat "$OUT/env.log"
first_check "$BIN"
RF="TENSORFOLD_CUDA_DEFINES=-DTF_WG_RFAST"
DE="TENSORFOLD_CUDA_DEFINES=-DTF_DN_EARLY_STATE"
image_checks rfast "$BIN" "$RF"
image_checks dnearly "$BIN" "$DE"
WIDE="TENSORFOLD_CUDA_WGMMA_GEMM=wide"
image_checks wide "$BIN" "$WIDE"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
step probe-build 60 "$NVCC" -O3 -arch=sm_90a -std=c++17 -o /tmp/walk_order "$(dirname "$0")/probe/walk_order.cu"
tail -3 "$OUT/probe-build.log"
step probe 60 /tmp/walk_order
cat "$OUT/probe.log"
step k16-build 60 "$NVCC" -O2 -arch=sm_90a -std=c++17 -o /tmp/k16_order "$(dirname "$0")/probe/k16_order.cu"
tail -3 "$OUT/k16-build.log"
step k16 30 /tmp/k16_order
tail -4 "$OUT/k16.log"
M=/dev/shm/m27
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
variants m4 $M 2 main=TF_MAIN=1 rfast=$RF dnearly=$DE
# What each part of a 4-bit round group costs: the round kernel with one part dropped (wrong outputs by design).
variants ab $M 1 main=TF_MAIN=1 nodeq=TENSORFOLD_CUDA_DEFINES=-DTF_ABL_NO_DEQUANT \
  nofold=TENSORFOLD_CUDA_DEFINES=-DTF_ABL_NO_FOLD nomma=TENSORFOLD_CUDA_DEFINES=-DTF_ABL_NO_MMA \
  noxtile=TENSORFOLD_CUDA_DEFINES=-DTF_ABL_NO_XTILE
rm -rf $M
B=/dev/shm/b27
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
variants bf $B 2 main=TF_MAIN=1 rfast=$RF "rsplit=$RF TENSORFOLD_CUDA_WGMMA_SPLIT=545" wide=$WIDE
# The wide prompt GEMM where the target is measured: a 16k prefill, main then wide.
for v in main=TF_MAIN=1 wide=$WIDE; do
  step "bf16k-${v%%=*}" 45 env ${v#*=} "$BIN" bench --device cuda --model $B --decode-tokens 4 --repeat 1 --quick \
    --prefill-lens 16384
  grep -E 'prefill' "$OUT/bf16k-${v%%=*}.log" | sed "s/^/bf16k-${v%%=*} /"
done
rm -rf $B
finish "$FINAL"
