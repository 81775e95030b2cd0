#!/bin/bash
# gpu_bf16_rounds.sh FINAL BUDGET_S BIN: (call 124) rounds of 5 to 64 rows of bf16 matrices on the wgmma kernel
# (project_wgmma_bf16.cu) and the 64-column 4-bit build's defaults of call 123 (3 stages, 5 blocks an SM, launches
# under 1,056 blocks split). Every check with the default binary and with the switches (the bf16 kernel off, split
# launches off, every matrix on wgmma), then 27B bf16 and 27B MLX4 rounds with each kernel on and off, alternating,
# a profile of a 16-row bf16 round, and the sweeps.
FINAL=${1:?out dir}; BUDGET=${2:-500}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for v in "WGMMA_BF16=0" "WGMMA_SPLIT=0" "WGMMA_MIN_OUTPUTS=0"; do
  n=check-$(echo "$v" | tr '=' '_')
  step "$n" 40 env TENSORFOLD_CUDA_$v "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/$n.log" | head | sed "s/^/$n /"
  grep -q "0 failed" "$OUT/$n.log" || { finish "$FINAL"; exit 1; }
done
# Every matrix on wgmma (the fixtures' are small) through the whole equality suites: drafted, chunked, resumed.
for f in tiny-wrapper-bf16 tiny-mlx-4bit; do
  step full-min0-$f 40 env TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=0 "$BIN" check --device cuda --model fixtures/$f
  grep -E "^oracle|cases,|^FAIL|^DIFF" "$OUT/full-min0-$f.log" | sed "s/^/full-min0-$f /"
done
all_checks "$BIN"
tiny_shas "$BIN"
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
for r in 1 2; do
  for v in "WGMMA_BF16=0" "WGMMA_BF16=1"; do
    n=rounds-bf16-$(echo "$v" | tr '=' '_')-$r
    step "$n" 40 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s27b --quick --decode-tokens 4 \
      --repeat 1 --prefill-lens 64 --round-rows 1,5,8,9,16,17,32,64
    grep -hE "round of" "$OUT/$n.log" | cut -c1-60 | sed "s/^/$n /"
  done
done
step prof-bf16-16 60 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 4 \
  --repeat 1 --quick --prefill-lens 64 --round-rows 16
sed -n "/profile of 4 rounds of 16 rows/,/^launches/p" "$OUT/prof-bf16-16.log" | head -12 | sed "s/^/prof-bf16-16 /"
step sweep-bf16 120 "$BIN" bench --device cuda --model /dev/shm/s27b --decode-tokens 32 --repeat 2 --prefill-lens 2048
grep -E "^\||copy" "$OUT/sweep-bf16.log" | cut -c1-130 | sed "s/^/sweep-bf16 /"
step sweep-bf16-off 120 env TENSORFOLD_CUDA_WGMMA_BF16=0 "$BIN" bench --device cuda --model /dev/shm/s27b \
  --decode-tokens 32 --repeat 2 --prefill-lens 2048
grep -E "^\|" "$OUT/sweep-bf16-off.log" | grep -E "round of|streams" | cut -c1-100 | sed "s/^/sweep-bf16-off /"
rm -rf /dev/shm/s27b
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  for v in "WGMMA_MAX_ROWS=16" "WGMMA_MAX_ROWS=64"; do
    n=rounds-m4-$(echo "$v" | tr '=' '_')-$r
    step "$n" 40 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s27m4 --quick --decode-tokens 4 \
      --repeat 1 --prefill-lens 64 --round-rows 1,16,17,24,32,33,48,64
    grep -hE "round of" "$OUT/$n.log" | cut -c1-60 | sed "s/^/$n /"
  done
done
step sweep-m4 120 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048
grep -E "^\||copy" "$OUT/sweep-m4.log" | cut -c1-130 | sed "s/^/sweep-m4 /"
rm -rf /dev/shm/s27m4
finish "$FINAL"
