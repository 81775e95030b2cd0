#!/bin/bash
# gpu_bf16_l1.sh FINAL BUDGET_S BIN: (not yet run: the session that wrote it got no second machine) the defaults
# call 128 chose: DeltaNet chains on dn_recur_batch and the bf16 wgmma round kernels' B tiles through L1. Every
# check, compute-sanitizer on tiny-mlx-4bit's full suite (the batched recurrence's first sanitizer run), then 27B
# bf16 rounds with x's tiles past L1 (-DWG_BF16_BTILE_CG) and through it (the default), twice, alternating; rounds
# of few rows with the bf16 kernel from 5 rows instead of 10; and the aggregate decode both ways.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step memcheck-4bit 90 "$cs" --print-limit 10 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -E "ERROR SUMMARY|cases," "$OUT/memcheck-4bit.log" | sed "s/^/memcheck-4bit /"
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
rounds() {  # rounds NAME ROWS ENV...: one quick bench of 27B bf16 rounds of ROWS under ENV
  local name=$1 rows=$2; shift 2
  step "$name" 25 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27b --quick --decode-tokens 4 --repeat 1 \
    --prefill-lens 64 --round-rows "$rows"
  grep -hE "round of" "$OUT/$name.log" | cut -c1-62 | sed "s/^/$name /"
}
for r in 1 2; do
  rounds cg-$r 1,12,16,32,64 TENSORFOLD_CUDA_DEFINES=-DWG_BF16_BTILE_CG
  rounds l1-$r 1,12,16,32,64 X=1
done
for r in 1 2; do
  rounds few10-$r 1,4,5,6,8,9,10 X=1
  rounds few5-$r 1,4,5,6,8,9,10 TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5
done
for v in l1 cg; do
  d=""; [ $v = cg ] && d=-DWG_BF16_BTILE_CG
  step sweep-bf16-$v 60 env TENSORFOLD_CUDA_DEFINES="$d" "$BIN" bench --device cuda --model /dev/shm/s27b \
    --decode-tokens 32 --repeat 2 --prefill-lens 2048
  grep -E "^\|" "$OUT/sweep-bf16-$v.log" | cut -c1-100 | sed "s/^/sweep-bf16-$v /"
done
rm -rf /dev/shm/s27b
finish "$FINAL"
