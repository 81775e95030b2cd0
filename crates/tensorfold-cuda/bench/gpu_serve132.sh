#!/bin/bash
# gpu_serve132.sh FINAL BUDGET_S BIN: (call 132) the server on the GPU, never measured under load before, and the
# prefill speed by prompt rows a forward, on the 27B MLX4 shape:
# - `bench --prefill-chunk C` for C = 256 (serve's default), 1,024, 2,048 (bench's default) and 4,096, prompts of
#   2k and 16k tokens;
# - `serve --device cuda` (synth now writes a tokenizer, so replies stream text) loaded by `bench concurrent` with
#   1,024-token random prompts and 128-token replies at 1, 4 and 16 streams, with serve's default chunk of 256 and
#   with 2,048, each reply checked against the same request alone (and, at 256, with "draft": false); then 64
#   streams at --parallel 64, with the KV cache serve sizes from --gpu-memory-utilization (its startup line is
#   printed), and with a 2 GiB one (16,384 tokens on this shape, so most of the 64 requests wait for pages), where
#   a 17,000-token prompt must get a clear error and the server must go on answering.
# The kernels are f3068fc's (call 130's SASS); first_check guards the run.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for c in 256 1024 2048 4096; do
  step chunk-$c 40 "$BIN" bench --device cuda --model $M --quick --decode-tokens 4 --repeat 1 \
    --round-rows 1 --prefill-lens 2048,16384 --prefill-chunk $c
  grep -E "prefill|error" "$OUT/chunk-$c.log" | sed "s/^/chunk-$c /"
done
# serve_load NAME CHUNK PARALLEL LEVELS [BENCH ARGS...]: a server with those settings, loaded once, then stopped.
# SERVE_ARGS: more serve flags; AFTER: a command run while the server is still up.
serve_load() {
  local name=$1 chunk=$2 par=$3 levels=$4; shift 4
  if [ "$(left)" -lt 70 ]; then echo "SKIP $name (budget)"; return; fi
  "$BIN" serve --device cuda --model $M --port 8321 --parallel "$par" --prefill-chunk "$chunk" $SERVE_ARGS \
    > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  echo "$name server up=$up after ${i} polls"
  [ $up = 1 ] && step "$name" 60 "$BIN" bench concurrent --url http://127.0.0.1:8321 --levels "$levels" \
    --prompt-tokens 1024 --max-tokens 128 --prompt-vocab 248000 "$@"
  [ $up = 1 ] && [ -n "$AFTER" ] && eval "$AFTER" > "$OUT/$name-after.log" 2>&1
  kill $pid; wait $pid 2> /dev/null
  grep -E "^\||DIFF|rror" "$OUT/$name.log" | sed "s/^/$name /"
  grep -E "panicked|rror|KV cache|serving" "$OUT/$name-serve.log" | head -5 | sed "s/^/$name-serve /"
  [ -n "$AFTER" ] && sed "s/^/$name-after /" "$OUT/$name-after.log" | cut -c1-400
}
# A prompt longer than a 2 GiB KV cache holds (a clear 400 expected), then a short request (still answered).
too_long() {
  python3 -c 'import json; print(json.dumps({"prompt": list(range(1, 17001)), "max_tokens": 4}))' > /tmp/long.json
  curl -s -w " HTTP %{http_code}\n" localhost:8321/v1/completions -H 'content-type: application/json' -d @/tmp/long.json
  curl -s -w " HTTP %{http_code}\n" localhost:8321/v1/completions -H 'content-type: application/json' \
    -d '{"prompt": [1, 2, 3], "max_tokens": 4}'
}
SERVE_ARGS= AFTER= serve_load serve-c256 256 16 1,4,16 --alone --serial
SERVE_ARGS= AFTER= serve_load serve-c2048 2048 16 1,4,16 --alone
SERVE_ARGS= AFTER= serve_load serve-c2048-p64 2048 64 64
SERVE_ARGS="--kv-cache-gib 2" AFTER=too_long serve_load serve-kv2-p64 2048 64 64
rm -rf $M
finish "$FINAL"
