#!/bin/bash
# gpu_serve133.sh FINAL BUDGET_S BIN: (call 133) where one stream through the server loses against `bench`
# (call 132: 9.4 to 9.8 ms a token after the first, against 6.8 ms in bench's plain decode loop), on the 27B MLX4
# shape:
# - `bench` (the plain one-row loop, `generate`) and its rounds of 1, 2, 4 and 8 rows;
# - `run --device cuda` (the engine, as serve runs it) on a 1,024-token prompt, 128 tokens, drafted and not;
# - `serve --device cuda` with the new GPU defaults (16 streams, prompt chunks of 2,048), drafted (each reply
#   checked against the same request alone) and with --no-drafts: 1,024-token prompts at 1, 4 and 16 streams,
#   then 128-token prompts with 256-token replies at 1 and 16 streams (decode-bound, beside bench's aggregate).
FINAL=${1:?out dir}; BUDGET=${2:-330}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
step bench 40 "$BIN" bench --device cuda --model $M --quick --decode-tokens 64 --repeat 2 --round-rows 1,2,4,8 \
  --prefill-lens 1024
grep -E "decode, 1 stream \||round of|prefill" "$OUT/bench.log" | cut -c1-90 | sed "s/^/bench /"
ids=$(python3 -c "print(','.join(str((i * 7919 + 13) % 248000) for i in range(1024)))")
for mode in drafts no-drafts; do
  flag=""; [ $mode = no-drafts ] && flag=--no-drafts
  step run-$mode 30 "$BIN" run --device cuda --model $M --prompt-ids "$ids" --max-tokens 128 --ignore-eos --json $flag
  tail -1 "$OUT/run-$mode.log" | python3 -c "import json,sys; j=json.loads(sys.stdin.read()); \
print('run-$mode', {k: j.get(k) for k in ['token_sha','prompt_tok_s','decode_tok_s','drafted','accepted','rounds']})"
done
serve_load() {  # serve_load NAME SERVE_FLAGS BENCH_FLAGS...: 1,024-token prompts, then decode-bound requests
  local name=$1 flags=$2; shift 2
  if [ "$(left)" -lt 60 ]; then echo "SKIP $name (budget)"; return; fi
  "$BIN" serve --device cuda --model $M --port 8321 $flags > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  if [ $up = 1 ]; then
    step "$name" 60 "$BIN" bench concurrent --url http://127.0.0.1:8321 --levels 1,4,16 --prompt-tokens 1024 \
      --max-tokens 128 --prompt-vocab 248000 "$@"
    step "$name-decode" 40 "$BIN" bench concurrent --url http://127.0.0.1:8321 --levels 1,16 --prompt-tokens 128 \
      --max-tokens 256 --prompt-vocab 248000 --seed 99
  fi
  kill $pid; wait $pid 2> /dev/null
  grep -E "^\||DIFF|rror" "$OUT/$name.log" "$OUT/$name-decode.log" | sed "s|^$OUT/||"
  grep -E "panicked|rror|KV cache|serving" "$OUT/$name-serve.log" | head -4 | sed "s/^/$name-serve /"
}
serve_load serve-drafts "" --alone
serve_load serve-nodrafts "--no-drafts"
rm -rf $M
finish "$FINAL"
