#!/bin/bash
# gpu_call148.sh FINAL BUDGET_S NEW: (call 148) bf16 KV pages (`--kv-cache-dtype bf16`, the `_kvbf16` attention
# kernels) against f32 ones, one binary: every check with f32 KV (full_check; backend-ops now also checks attention
# on bf16 pages) and every fixture's suite and oracle with bf16 KV; then on the 27B MLX4 shape, f32 and bf16 KV
# alternating twice: prefills of 2k, 16k and 32k tokens with decode at each context, rounds of 1 and 16 rows,
# aggregate decode at 1 to 64 streams; and the KV cache `serve` sizes either way.
FINAL=${1:?out dir}; BUDGET=${2:-540}; NEW=${3:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
for f in tiny-wrapper-bf16 tiny-mlx-4bit tiny-mlx-mixed tiny-flat-f32-sharded tiny-flat-f16-notok; do
  step kvb-full-$f 40 "$NEW" check --device cuda --kv-cache-dtype bf16 --model fixtures/$f
done
step kvb-coder 30 "$NEW" check --device cuda --kv-cache-dtype bf16 --quick --model models/tensorfold-coder-tiny
grep -hE "^oracle|cases,|^FAIL|^DIFF|^error|panicked" "$OUT"/kvb-*.log | head -20
for m in tiny-mlx-4bit tiny-wrapper-bf16; do
  step kvb-run-$m 20 "$NEW" run --device cuda --kv-cache-dtype bf16 --model fixtures/$m --prompt-ids 1,2,3,4,5,6,7,8 \
    --max-tokens 300 --ignore-eos --json
  echo "kvb-run-$m $(tail -1 "$OUT/kvb-run-$m.log" | grep -o '"token_sha":"[0-9a-f]*"')"
done
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
# `kvsize NAME DTYPE`: the KV cache `serve` sizes from the free memory (its start-up line), then stops it.
kvsize() {
  "$NEW" serve --device cuda --model $M --port 18148 --kv-cache-dtype "$2" > "$OUT/$1.log" 2>&1 &
  local pid=$! i
  for i in $(seq 1 60); do grep -q "tokens across" "$OUT/$1.log" && break; sleep 1; done
  kill $pid; wait $pid 2>/dev/null
  grep -h "tokens across" "$OUT/$1.log" | sed "s/^/$1 /"
}
# `long NAME DTYPE`: prefills of 2k, 16k and 32k tokens with decode at each context, rounds, streams.
long() {
  step "$1" 150 "$NEW" bench --device cuda --model $M --kv-cache-dtype "$2" --decode-tokens 16 --repeat 1 \
    --round-rows 1,16 --prefill-lens 2048,16384,32768
  grep -E 'prefill|decode at|decode, 1 stream \||round of|streams \|' "$OUT/$1.log" | cut -c1-110 | sed "s/^/$1 /"
}
long m4-f32-1 f32
long m4-bf16-1 bf16
kvsize serve-f32 f32
kvsize serve-bf16 bf16
long m4-f32-2 f32
long m4-bf16-2 bf16
rm -rf $M
finish "$FINAL"
