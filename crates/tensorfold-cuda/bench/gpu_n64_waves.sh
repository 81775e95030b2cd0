#!/bin/bash
# gpu_n64_waves.sh FINAL BUDGET_S BIN: (call 123) the 64-column wgmma build's waves. Its 32-row gate/up launch has
# 544 blocks for 528 places (4 an SM) and took 2 blocks' time in call 122. Variants, alternating: main; split
# launches up to 4,096 blocks (TENSORFOLD_CUDA_WGMMA_SPLIT=4097, every launch of the build then splits its
# residues); 3 stages and 5 blocks an SM (TENSORFOLD_CUDA_DEFINES, its cubin in the cache too); both. Checks first
# for the new build, rounds of 8 to 64 rows, profiles of 32- and 64-row rounds, then sweeps.
FINAL=${1:?out dir}; BUDGET=${2:-500}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
V5="-DWG_N64_STAGES=3 -DWG_N64_BLOCKS=5"
first_check "$BIN"
for v in "TENSORFOLD_CUDA_WGMMA_SPLIT=4097" "TENSORFOLD_CUDA_DEFINES=$V5"; do
  n=check-$(echo "$v" | tr -c 'A-Za-z0-9_\n' '_' | cut -c17-40)
  step "$n" 40 env "$v" "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/$n.log" | head | sed "s/^/$n /"
  grep -q "0 failed" "$OUT/$n.log" || { finish "$FINAL"; exit 1; }
done
step check-v5-split0 40 env TENSORFOLD_CUDA_DEFINES="$V5" TENSORFOLD_CUDA_WGMMA_SPLIT=0 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases," "$OUT/check-v5-split0.log" | sed "s/^/check-v5-split0 /"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
variant() {  # variant NAME CMD...: the rounds of 8 to 64 rows under env settings
  local n=$1; shift
  step "$n" 40 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27m4 --quick --decode-tokens 4 \
    --repeat 1 --prefill-lens 64 --round-rows 1,8,16,17,24,32,33,48,64
  grep -hE "round of" "$OUT/$n.log" | cut -c1-60 | sed "s/^/$n /"
}
for r in 1 2; do
  variant main-$r TF_X=1
  variant split-$r TENSORFOLD_CUDA_WGMMA_SPLIT=4097
  variant v5-$r TENSORFOLD_CUDA_DEFINES="$V5"
  variant v5split-$r TENSORFOLD_CUDA_DEFINES="$V5" TENSORFOLD_CUDA_WGMMA_SPLIT=4097
done
for rows in 32 64; do
  for v in "main TF_X=1" "split TENSORFOLD_CUDA_WGMMA_SPLIT=4097" "v5 TENSORFOLD_CUDA_DEFINES=$V5"; do
    name=${v%% *}; setting=${v#* }
    n=prof-$name-$rows
    step "$n" 40 env "$setting" TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 \
      --decode-tokens 4 --repeat 1 --quick --prefill-lens 64 --round-rows $rows
    sed -n "/profile of 4 rounds of $rows rows/,/^launches/p" "$OUT/$n.log" | grep -E "project_wgmma_a4|total|launches" | head -8 | sed "s/^/$n /"
  done
done
for v in "split TENSORFOLD_CUDA_WGMMA_SPLIT=4097" "v5 TENSORFOLD_CUDA_DEFINES=$V5"; do
  name=${v%% *}; setting=${v#* }
  step sweep-$name 60 env "$setting" "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048
  grep -E "^\|" "$OUT/sweep-$name.log" | grep -E "round of|streams|decode, 1 stream \|" | cut -c1-100 | sed "s/^/sweep-$name /"
done
rm -rf /dev/shm/s27m4
finish "$FINAL"
