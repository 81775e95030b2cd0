#!/bin/bash
# gpu_l2.sh FINAL BUDGET_S BIN: call 58. Weights prefetched into L2 ahead of each decode projection (prefetch.rs):
# every check with the default; quick runs on the 27B MLX4 shape with TENSORFOLD_CUDA_PREFETCH = 0 (off), 8, 16
# (the default), 32 and 48 MiB, in turn, twice; a profile with 0 and 16; the 9B MLX4 shape with 0 and 16; then a
# whole 27B bf16 checkpoint in /dev/shm (synth --threads 16): its sweep with prefill at 2k and 16k, and quick runs
# with 0 and 16.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
df -h /dev/shm /tmp; free -g
all_checks "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  for p in 0 8 16 32 48; do quick 27b-pf$p-$i /tmp/s27m4 "$BIN" TENSORFOLD_CUDA_PREFETCH=$p; done
done
for p in 0 16; do
  step 27b-prof-pf$p 40 env TENSORFOLD_CUDA_PREFETCH=$p TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda \
    --model /tmp/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  grep -E "^\| project_stream|^\| l2_prefetch|^\| add_rms|^\| swiglu|round of|launches" "$OUT/27b-prof-pf$p.log" | head -16 | sed "s/^/prof-pf$p /"
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  for p in 0 16; do quick 9b-pf$p-$i /tmp/s9m4 "$BIN" TENSORFOLD_CUDA_PREFETCH=$p; done
done
rm -rf /tmp/s9m4
step synth-27b-bf16 200 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
cat "$OUT/synth-27b-bf16.log"; free -g
step 27b-bf16-sweep 150 "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384
grep -E 'copy|decode|streams|round of|prefill|loaded' "$OUT/27b-bf16-sweep.log" | sed "s/^/27b-bf16-sweep /"
for p in 0 16; do quick 27b-bf16-pf$p /dev/shm/s27b "$BIN" TENSORFOLD_CUDA_PREFETCH=$p; done
rm -rf /dev/shm/s27b
finish "$FINAL"
