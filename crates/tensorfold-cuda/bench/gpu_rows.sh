#!/bin/bash
# gpu_rows.sh FINAL BUDGET_S BIN: call 59. Tensor-core launches with the row blocks of one output tile side by side
# (project.rs mma_grid): every check with that default; quick runs with TENSORFOLD_CUDA_ROWS_APART=1 (the old
# order) and the default, in turn, twice, on the 27B and 9B MLX4 shapes; the 27B MLX4 sweep (prefill 2k and 16k);
# a whole 27B bf16 checkpoint in /dev/shm: its sweep and quick runs of both orders; the 9B bf16 shape, both
# orders; then the transformers peer on the whole 27B bf16 checkpoint.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-apart-$i /tmp/s27m4 "$BIN" TENSORFOLD_CUDA_ROWS_APART=1
  quick 27b-side-$i /tmp/s27m4 "$BIN"
done
step 27b-sweep 90 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-sweep.log" | sed "s/^/27b-sweep /"
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  quick 9b-apart-$i /tmp/s9m4 "$BIN" TENSORFOLD_CUDA_ROWS_APART=1
  quick 9b-side-$i /tmp/s9m4 "$BIN"
done
rm -rf /tmp/s9m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
step 27b-bf16-sweep 100 "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384
grep -E 'copy|decode|streams|round of|prefill|loaded' "$OUT/27b-bf16-sweep.log" | sed "s/^/27b-bf16-sweep /"
quick 27b-bf16-apart /dev/shm/s27b "$BIN" TENSORFOLD_CUDA_ROWS_APART=1
quick 27b-bf16-side /dev/shm/s27b "$BIN"
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /tmp/s9b
quick 9b-bf16-apart /tmp/s9b "$BIN" TENSORFOLD_CUDA_ROWS_APART=1
quick 9b-bf16-side /tmp/s9b "$BIN"
rm -rf /tmp/s9b
step peer-27b-bf16 150 python3 "$(dirname "$0")/peer_transformers.py" /dev/shm/s27b 16
grep -E "peer" "$OUT/peer-27b-bf16.log" | tail -5
rm -rf /dev/shm/s27b
finish "$FINAL"
