#!/bin/bash
# gpu_call149.sh FINAL BUDGET_S NEW OLD: (call 149) keys stored in groups of 4 dimensions and value rows read 4
# dimensions a lane (attention.cu key_index, tile_values' whole-tile path), attn_merge weighing chunks side by side;
# NEW against OLD (main's kernels before them). First every check of NEW (backend-ops, every fixture's suite and
# oracle, with f32 and with bf16 KV, the tiny shas); then on the 27B MLX4 shape, alternating OLD and NEW:
# `bench --at-context` (prefills of 2k, 16k and 32k tokens, one-stream decode at each context) with f32 and bf16 KV,
# the quick bench (decode, rounds of 1 and 16 rows, a 2k prefill), and NEW's event profile of decode at 32k.
FINAL=${1:?out dir}; BUDGET=${2:-450}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
all_checks "$NEW"
for f in tiny-wrapper-bf16 tiny-mlx-4bit; do
  step kvb-full-$f 40 "$NEW" check --device cuda --kv-cache-dtype bf16 --model fixtures/$f
done
grep -hE "^oracle|cases,|^FAIL|^DIFF|^error|panicked" "$OUT"/kvb-*.log | head -12
tiny_shas "$NEW"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
# `ctx NAME BIN DTYPE [ENV...]`: prefills of 2k, 16k and 32k tokens and decode at each context.
ctx() {
  local name=$1 bin=$2 dt=$3; shift 3
  step "$name" 50 env "$@" "$bin" bench --device cuda --model $M --kv-cache-dtype "$dt" --at-context \
    --prefill-lens 2048,16384,32768
  grep -E 'copy|prefill|decode at' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
ctx ctx-old-f32 "$OLD" f32
ctx ctx-new-f32 "$NEW" f32
ctx ctx-old-bf16 "$OLD" bf16
ctx ctx-new-bf16 "$NEW" bf16
quick q-old $M "$OLD"
quick q-new $M "$NEW"
ctx ctx-new-f32-2 "$NEW" f32
ctx ctx-old-f32-2 "$OLD" f32
ctx prof-new-f32 "$NEW" f32 TENSORFOLD_CUDA_PROFILE=1
sed -n '/profile of 8 decode rounds at 32768/,/^launches/p' "$OUT/prof-new-f32.log" | head -14 | sed "s/^/prof /"
rm -rf $M
finish "$FINAL"
