#!/bin/bash
# gpu_call167.sh FINAL BUDGET_S BIN: DeltaNet chains with a state row on eight lanes (dn_recur_oct, the default)
# against the batched kernel (TENSORFOLD_CUDA_DN_OCT=0, dn_recur_batch_v2): every check, Nsight Compute on one
# 2,048-row chain launch of each, then 27B bf16 prefills of 2k and 16k and 27B MLX4 quick benches (16-row rounds,
# 2k prefill) alternating.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
B="TENSORFOLD_CUDA_DN_OCT=0"
step batch-full-tiny-mlx-4bit 40 env $B "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -hE "cases,|^FAIL" "$OUT"/batch-full-*.log | sed "s/^/batch /"
M4=/dev/shm/s27m4l
step synth-m4l 30 "$BIN" synth --shape 27b --format mlx4 --layers 4 --threads 16 --out $M4
ncu_kernel ncu-oct dn_recur_oct 1 1 "$BIN" $M4 2048
ncu_kernel ncu-batch dn_recur_batch_v2 1 1 "$BIN" $M4 2048 $B
rm -rf $M4
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m4-oct-$r $M "$BIN"
  quick m4-batch-$r $M "$BIN" $B
done
rm -rf $M
BF=/dev/shm/s27bf
step synth-bf 90 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
for r in 1 2; do
  at_context bf-oct-$r $BF 2048,16384
  at_context bf-batch-$r $BF 2048,16384 $B
done
rm -rf $BF
finish "$FINAL"
