#!/bin/bash
# gpu_call170.sh FINAL BUDGET_S BIN: the fused DeltaNet decode mixer (deltanet_fused.cu: conv, step and gated norm in
# one launch a layer): every check, then 27B MLX4 quick benches fused (the default) against the three launches
# (DN_FUSED=0), alternating, and the event profiles of both; 9B MLX4 the same; then 27B bf16 both ways and
# transformers beside the 27B bf16 shape (its loader now one shard at a time).
# A record of what ran: the fused kernel and its switch are not on main (commit 6c76a2c had them; the change is
# logs/call170/dn_decode_fused.patch).
FINAL=${1:?out dir}; BUDGET=${2:-540}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2 3; do
  quick m4-fused-$r $M "$BIN"
  quick m4-three-$r $M "$BIN" TENSORFOLD_CUDA_DN_FUSED=0
done
profile_decode m4-prof-fused $M "$BIN"
profile_decode m4-prof-three $M "$BIN" TENSORFOLD_CUDA_DN_FUSED=0
rm -rf $M
M9=/dev/shm/s9m4
step synth-9m4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
for r in 1 2; do
  quick m9-fused-$r $M9 "$BIN"
  quick m9-three-$r $M9 "$BIN" TENSORFOLD_CUDA_DN_FUSED=0
done
rm -rf $M9
BF=/dev/shm/s27bf
step synth-bf 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
quick bf-fused-1 $BF "$BIN"
quick bf-three-1 $BF "$BIN" TENSORFOLD_CUDA_DN_FUSED=0
peer peer-27b-bf16 $BF
rm -rf $BF
finish "$FINAL"
