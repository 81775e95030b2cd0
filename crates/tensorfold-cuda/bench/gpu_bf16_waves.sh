#!/bin/bash
# gpu_bf16_waves.sh FINAL BUDGET_S BIN: (call 125) the bf16 wgmma round kernel's launches. Its 16-row gate/up launch
# has 544 blocks of 64 outputs for 528 places (4 an SM) and streamed at 2.45 TB/s in call 124. Variants on 27B bf16,
# alternating, every one with the kernel from 5 rows (TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5) so the whole curve shows:
# main (4 stages); split launches up to 4,096 blocks; 3 stages (5 blocks an SM; its cubin in the cache too); both;
# and the kernel off. Checks first for the 3-stage build.
FINAL=${1:?out dir}; BUDGET=${2:-500}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step check-s3 40 env TENSORFOLD_CUDA_WGMMA_BF16_STAGES=3 TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/check-s3.log" | sed "s/^/check-s3 /"
step check-min5 40 env TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5 TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=0 "$BIN" check --device cuda --ops --model fixtures/tiny-wrapper-bf16
grep -E "^backend-ops|^FAIL|cases,|^error|panicked|^oracle" "$OUT/check-min5.log" | sed "s/^/check-min5 /"
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
variant() {  # variant NAME ENV...: rounds of 1 to 64 rows under the env settings
  local n=$1; shift
  step "$n" 40 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27b --quick --decode-tokens 4 \
    --repeat 1 --prefill-lens 64 --round-rows 1,8,9,10,12,16,17,32,64
  grep -hE "round of" "$OUT/$n.log" | cut -c1-60 | sed "s/^/$n /"
}
M5=TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5
for r in 1 2; do
  variant main-$r $M5
  variant split-$r $M5 TENSORFOLD_CUDA_WGMMA_SPLIT=4097
  variant s3-$r $M5 TENSORFOLD_CUDA_WGMMA_BF16_STAGES=3
  variant s3split-$r $M5 TENSORFOLD_CUDA_WGMMA_BF16_STAGES=3 TENSORFOLD_CUDA_WGMMA_SPLIT=4097
  variant off-$r TENSORFOLD_CUDA_WGMMA_BF16=0
done
for v in "split TENSORFOLD_CUDA_WGMMA_SPLIT=4097" "s3 TENSORFOLD_CUDA_WGMMA_BF16_STAGES=3"; do
  name=${v%% *}; setting=${v#* }
  step prof-$name 40 env "$setting" TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27b \
    --decode-tokens 4 --repeat 1 --quick --prefill-lens 64 --round-rows 16
  sed -n "/profile of 4 rounds of 16 rows/,/^launches/p" "$OUT/prof-$name.log" | grep -E "project_wgmma" | head -6 | sed "s/^/prof-$name /"
done
rm -rf /dev/shm/s27b
finish "$FINAL"
