#!/bin/bash
# gpu_call144.sh FINAL BUDGET_S NEW OLD: (call 144) the burst of call 143 again with the prompt cache held to the
# H100's 4.22 GiB (on the H200 the 9.67 GiB default kept all 32 snapshots, so the eviction order never showed):
# OLD b251588 (plain LRU) against NEW (replies' ends first). Then NEW's event profiles of 27B MLX4 rounds of 1 and
# 16 rows and a 2,048-row prompt chunk (the per-launch costs BENCHMARKS.md §7 models). Then a measurement: every
# projection input rounded to bf16 (-DTF_X_BF16, off by default): the fixtures' full suites (do the equalities
# hold?) and the float64 oracle (what closeness the hi + lo form buys), the tiny shas, and a 27B MLX4 quick bench.
FINAL=${1:?out dir}; BUDGET=${2:-400}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
serve_twice old "$OLD" $M "$NEW" --prompt-cache-gib 4.22
serve_twice new "$NEW" $M "$NEW" --prompt-cache-gib 4.22
step prof-27b-mlx4 60 env TENSORFOLD_CUDA_PROFILE=1 "$NEW" bench --device cuda --model $M --decode-tokens 16 \
  --repeat 1 --quick --prefill-lens 2048
grep -E "^\| (round|decode, 1 stream \|)" "$OUT/prof-27b-mlx4.log" | cut -c1-100 | sed "s/^/prof-27b-mlx4 /"
quick q-default $M "$NEW"
quick q-xbf16 $M "$NEW" TENSORFOLD_CUDA_DEFINES=-DTF_X_BF16
for f in tiny-wrapper-bf16 tiny-mlx-4bit tiny-mlx-mixed tiny-flat-f32-sharded tiny-flat-f16-notok; do
  step xbf16-$f 40 env TENSORFOLD_CUDA_DEFINES=-DTF_X_BF16 "$NEW" check --device cuda --model fixtures/$f
done
step xbf16-coder 30 env TENSORFOLD_CUDA_DEFINES=-DTF_X_BF16 "$NEW" check --device cuda --quick --model models/tensorfold-coder-tiny
grep -hE "^oracle|cases,|panicked|^error" "$OUT"/xbf16-*.log | sed "s/^/xbf16 /"
for m in tiny-mlx-4bit tiny-wrapper-bf16; do
  step xrun-$m 20 env TENSORFOLD_CUDA_DEFINES=-DTF_X_BF16 "$NEW" run --device cuda --model fixtures/$m --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 300 --ignore-eos --json
  echo "xrun-$m-300 $(tail -1 "$OUT/xrun-$m.log" | grep -o '"token_sha":"[0-9a-f]*"')"
done
rm -rf $M
finish "$FINAL"
