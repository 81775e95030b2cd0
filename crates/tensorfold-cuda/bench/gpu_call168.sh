#!/bin/bash
# gpu_call168.sh FINAL BUDGET_S BIN: dn_recur_oct with a batch's q and k norms side by side: the checks, then 27B
# MLX4 quick benches with chains of one batch on the batched kernel (the default), on octets (DN_OCT=all) and
# everything batched (DN_OCT=0), alternating; 27B bf16 prefills of 2k and 16k, default against DN_OCT=0; and the
# event profile of the 16k prefill (where its time goes, launch by launch).
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
all_checks "$BIN"
tiny_shas "$BIN"
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m4-default-$r $M "$BIN"
  quick m4-octall-$r $M "$BIN" TENSORFOLD_CUDA_DN_OCT=all
  quick m4-batch-$r $M "$BIN" TENSORFOLD_CUDA_DN_OCT=0
done
rm -rf $M
BF=/dev/shm/s27bf
step synth-bf 90 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
for r in 1 2; do
  at_context bf-default-$r $BF 2048,16384
  at_context bf-batch-$r $BF 2048,16384 TENSORFOLD_CUDA_DN_OCT=0
done
step bf-profile 60 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model $BF --at-context --prefill-lens 16384
sed -n '/profile of the 16384-token prefill/,/^$/p' "$OUT/bf-profile.log" | head -40 | sed "s/^/bf-profile /"
rm -rf $BF
finish "$FINAL"
