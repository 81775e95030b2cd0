#!/bin/bash
# gpu_centred.sh FINAL BUDGET_S OLD NEW: call 47. NEW: hi and lo in two B columns (call 46) with the 4-bit codes
# centred (q - 8, bias b + 8s) for the float64 oracle, and the prompt kernel in two warp layouts of the same bits
# (TENSORFOLD_CUDA_GEMM_WARPS=8 default, or 4). Every check (backend-ops with both layouts); then OLD (e9a8f93) and
# NEW in turn: quick runs on the 27B MLX 4-bit shape (NEW also with 4 prompt warps and with one output tile at 16
# rows, TENSORFOLD_CUDA_MMA_STAGES=4), its 16k prefill, and the 9B MLX 4-bit shape.
FINAL=${1:?out dir}; BUDGET=${2:-500}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step check-ops-w4 60 env TENSORFOLD_CUDA_GEMM_WARPS=4 "$NEW" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
grep -hE "^backend-ops|^FAIL|panicked" "$OUT"/check-ops-w4.log | sed "s/^/w4 /"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-old-$i /tmp/s27m4 "$OLD"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
  quick 27b-w4-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_GEMM_WARPS=4
  quick 27b-m1-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_MMA_STAGES=4
done
for b in old new w4; do
  bin=$NEW; [ $b = old ] && bin=$OLD
  step 27b-16k-$b 60 env TENSORFOLD_CUDA_GEMM_WARPS=$([ $b = w4 ] && echo 4 || echo 8) "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 16384
  grep -E 'prefill' "$OUT/27b-16k-$b.log" | sed "s/^/27b-16k-$b /"
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
quick 9b-old /tmp/s9m4 "$OLD"
quick 9b-new /tmp/s9m4 "$NEW"
quick 9b-w4 /tmp/s9m4 "$NEW" TENSORFOLD_CUDA_GEMM_WARPS=4
rm -rf /tmp/s9m4
finish "$FINAL"
