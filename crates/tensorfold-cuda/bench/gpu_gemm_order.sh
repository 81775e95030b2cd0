#!/bin/bash
# gpu_gemm_order.sh FINAL BUDGET_S BIN: call 60. The prompt kernel's blocks in groups of 8 row blocks walking the
# output tiles together (project_gemm.cu gemm_block): backend-ops (the prompt kernel against the decode kernels bit
# for bit) and two fixtures' equality suites; prefill on the 9B bf16 and 27B MLX4 shapes with
# TENSORFOLD_CUDA_GEMM_ORDER=tiles (the old order) and the default, in turn, twice.
FINAL=${1:?out dir}; BUDGET=${2:-240}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step check-ops 90 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
for f in tiny-mlx-4bit tiny-flat-f32-sharded; do step full-$f 30 "$BIN" check --device cuda --model fixtures/$f; done
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error|panicked" "$OUT"/check-*.log "$OUT"/full-*.log | head -12
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /tmp/s9b
for i in 1 2; do
  for o in tiles groups; do
    step 9b-bf16-$o-$i 30 env TENSORFOLD_CUDA_GEMM_ORDER=$o "$BIN" bench --device cuda --model /tmp/s9b --decode-tokens 4 --repeat 1 --quick --prefill-lens 2048,8192
    grep -E 'prefill' "$OUT/9b-bf16-$o-$i.log" | sed "s/^/9b-bf16-$o-$i /"
  done
done
rm -rf /tmp/s9b
step synth-27b-mlx4 40 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  for o in tiles groups; do
    step 27b-$o-$i 30 env TENSORFOLD_CUDA_GEMM_ORDER=$o "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 4 --repeat 1 --quick --prefill-lens 2048
    grep -E 'prefill' "$OUT/27b-$o-$i.log" | sed "s/^/27b-$o-$i /"
  done
done
rm -rf /tmp/s27m4
finish "$FINAL"
