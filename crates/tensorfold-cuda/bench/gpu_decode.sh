#!/bin/bash
# gpu_decode.sh BIN OUT BUDGET_S: the decode re-measure after keeping freed memory in the pool: quick re-check,
# then 27B and 9B MLX 4-bit (decode, rounds, streams, a short prefill), skipping steps once the budget is spent.
BIN=${1:?binary}; OUT=${2:?out dir}; BUDGET=${3:-80}
mkdir -p "$OUT"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
step check-ops 25 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error" "$OUT"/check-*.log
step synth-27b-mlx4 50 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
step bench-27b-mlx4 20 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 256
rm -rf /tmp/s27m4
step synth-9b-mlx4 20 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
step bench-9b-mlx4 12 "$BIN" bench --device cuda --model /tmp/s9m4 --decode-tokens 32 --repeat 2 --prefill-lens 256
for f in "$OUT"/bench-*.log; do [ -f "$f" ] && { echo "== $(basename $f)"; grep -E "^\||copy|model:|error" "$f" | tail -20; }; done
echo "total $(( $(date +%s) - T0 ))s"
