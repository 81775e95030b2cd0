#!/bin/bash
# gpu_call165.sh FINAL BUDGET_S BIN: the bf16 prompt GEMM pipelined (one group's wgmmas running while the next is
# staged and issued) against TF_GEMM_SERIAL (the kernel as it was, SASS identical): every check, then 27B bf16
# prefills of 2k and 16k alternating, and Nsight Compute's stall reasons on the gate launch of each. Then the 27B
# MLX4 shape: the 16-row round with every launch on 64-output blocks (TENSORFOLD_CUDA_WGMMA_M1=all: a split gate/up
# launch 6.6 waves of 660 blocks instead of 4.1 of 528) against the default, and the 4-bit prompt GEMM unpacking the
# next group's codes ahead of the wait (TF_GEMM_PIPE_A4, off by default; its checks first) against the default.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
S="TENSORFOLD_CUDA_DEFINES=-DTF_GEMM_SERIAL"
A4="TENSORFOLD_CUDA_DEFINES=-DTF_GEMM_PIPE_A4"
step a4pipe-ops 60 env $A4 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
for f in tiny-mlx-4bit tiny-mlx-mixed; do step a4pipe-full-$f 40 env $A4 "$BIN" check --device cuda --model fixtures/$f; done
grep -hE "^backend-ops|^oracle|cases,|^FAIL" "$OUT"/a4pipe-*.log | sed "s/^/a4pipe /"
B4=/dev/shm/s27bf4
step synth-bf4 60 "$BIN" synth --shape 27b --format bf16 --layers 4 --threads 16 --out $B4
# Prompt launches of a 2048-row chunk, layer 0 (DeltaNet): qkv, z, b, a, out, gate, up, down: the gate.
ncu_kernel ncu-pipe project_wgmma_gemm_bf16_w3 5 1 "$BIN" $B4 2048
ncu_kernel ncu-serial project_wgmma_gemm_bf16_w3 5 1 "$BIN" $B4 2048 $S
rm -rf $B4
B=/dev/shm/s27bf
step synth-bf 90 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
for r in 1 2; do
  at_context bf-pipe-$r $B 2048,16384
  at_context bf-serial-$r $B 2048,16384 $S
done
rm -rf $B
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m4-default-$r $M "$BIN"
  quick m4-m1all-$r $M "$BIN" TENSORFOLD_CUDA_WGMMA_M1=all
done
for r in 1 2; do
  at_context m4-serial-$r $M 2048,16384
  at_context m4-a4pipe-$r $M 2048,16384 $A4
done
rm -rf $M
finish "$FINAL"
