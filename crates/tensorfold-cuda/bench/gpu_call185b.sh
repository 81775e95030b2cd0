#!/bin/bash
# gpu_call185b.sh FINAL BUDGET_S BIN: gpu_call185.sh cut to fit the device time left: main's first check, backend-ops
# on the rfast and dnearly images, the walk-order probe, quick benches of 27B MLX4 (main, rfast, dnearly, twice) and
# 27B bf16 (main, rfast, rfast with the gate/up launch split, once each).
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1; cat "$OUT/env.log"
first_check "$BIN"
RF="TENSORFOLD_CUDA_DEFINES=-DTF_WG_RFAST"
DE="TENSORFOLD_CUDA_DEFINES=-DTF_DN_EARLY_STATE"
step rfast-check-ops 30 env "$RF" "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
step dnearly-check-ops 30 env "$DE" "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -hE "^backend-ops|cases,|^FAIL|^error|panicked" "$OUT"/rfast-check-ops.log "$OUT"/dnearly-check-ops.log
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
step probe-build 60 "$NVCC" -O3 -arch=sm_90a -std=c++17 -o /tmp/walk_order "$(dirname "$0")/probe/walk_order.cu"
tail -3 "$OUT/probe-build.log"
step probe 40 /tmp/walk_order
cat "$OUT/probe.log"
M=/dev/shm/m27
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
variants m4 $M 2 main=TF_MAIN=1 rfast=$RF dnearly=$DE
rm -rf $M
B=/dev/shm/b27
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
variants bf $B 1 main=TF_MAIN=1 rfast=$RF "rsplit=$RF TENSORFOLD_CUDA_WGMMA_SPLIT=545"
rm -rf $B
finish "$FINAL"
