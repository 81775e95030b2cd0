#!/bin/bash
# gpu_ways120.sh FINAL BUDGET_S BIN: (call 120) split wgmma launches of rounds with fewer blocks an output block
# (TENSORFOLD_CUDA_WGMMA_WAYS: 8, one residue a block, the default; 4, 2, 1): backend-ops and tiny-mlx-4bit's full
# suite with each; the 27B MLX4 rounds of 1 to 16 rows with each, in turn, twice.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for w in 4 2 1; do
  step ops-ways$w 30 env TENSORFOLD_CUDA_WGMMA_WAYS=$w "$BIN" check --device cuda --ops --model fixtures/tiny-mlx-4bit
  grep -E "^backend-ops|^FAIL|cases," "$OUT/ops-ways$w.log" | cut -c1-200 | sed "s/^/ops-ways$w /"
done
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
rr() {  # rr NAME ENV...
  local name=$1; shift
  step "$name" 40 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick \
    --prefill-lens 64 --round-rows 1,5,8,12,16
  grep -E 'round of|decode, 1 stream \|' "$OUT/$name.log" | cut -c1-80 | sed "s/^/$name /"
}
for r in 1 2; do
  rr ways8-$r
  rr ways4-$r TENSORFOLD_CUDA_WGMMA_WAYS=4
  rr ways2-$r TENSORFOLD_CUDA_WGMMA_WAYS=2
  rr ways1-$r TENSORFOLD_CUDA_WGMMA_WAYS=1
done
for w in 8 2; do
  step prof-ways$w 40 env TENSORFOLD_CUDA_WGMMA_WAYS=$w TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda \
    --model /dev/shm/s27m4 --decode-tokens 4 --repeat 1 --quick --prefill-lens 64
  sed -n '/profile of 4 rounds of 16 rows/,/^launches/p' "$OUT/prof-ways$w.log" | head -10 | sed "s/^/prof-ways$w /"
done
rm -rf /dev/shm/s27m4
finish "$FINAL"
