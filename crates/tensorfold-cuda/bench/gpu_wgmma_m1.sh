#!/bin/bash
# gpu_wgmma_m1.sh FINAL BUDGET_S BIN: (call 110) the wgmma kernel from 5 rows (its 16-column build up to 8) and its
# blocks of 64 outputs (_m1) for launches of less than a wave: every check with the default binary and with each
# switch, then 27B and 9B MLX4 rounds of 1 to 16 rows with the kernel off, on, without _m1 and from 9 rows, and a
# profile of 16-row rounds.
FINAL=${1:?out dir}; BUDGET=${2:-500}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for v in "WGMMA_M1=0" "WGMMA_MIN_OUTPUTS=0" "WGMMA=0"; do
  n=check-$(echo "$v" | tr '=' '_')
  step "$n" 40 env TENSORFOLD_CUDA_$v "$BIN" check --device cuda --ops --model fixtures/tiny-mlx-4bit
  grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/$n.log" | head | sed "s/^/$n /"
  grep -q "0 failed" "$OUT/$n.log" || { finish "$FINAL"; exit 1; }
done
all_checks "$BIN"
tiny_shas "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-off /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_WGMMA=0
quick q-on /dev/shm/s27m4 "$BIN"
for r in 1 2; do
  for v in "WGMMA=0" "WGMMA=1" "WGMMA_M1=0" "WGMMA_MIN_ROWS=9"; do
    n=rounds-$(echo "$v" | tr '=' '_')-$r
    step "$n" 30 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s27m4 --quick --decode-tokens 4 \
      --repeat 1 --prefill-lens 64 --round-rows 1,5,6,8,9,12,16
    grep -hE "round of" "$OUT/$n.log" | cut -c1-52 | sed "s/^/$n /"
  done
done
step prof-on 60 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 4 \
  --repeat 1 --quick --prefill-lens 64
grep -E "project_wgmma" "$OUT/prof-on.log" | head -8 | sed "s/^/prof-on /"
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 60 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for v in "WGMMA=0" "WGMMA=1" "WGMMA_M1=0"; do
  n=rounds9-$(echo "$v" | tr '=' '_')
  step "$n" 30 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s9m4 --quick --decode-tokens 4 \
    --repeat 1 --prefill-lens 64 --round-rows 1,5,8,12,16
  grep -hE "round of" "$OUT/$n.log" | cut -c1-52 | sed "s/^/$n /"
done
rm -rf /dev/shm/s9m4
finish "$FINAL"
