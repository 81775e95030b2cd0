#!/bin/bash
# gpu_serve132.sh FINAL BUDGET_S BIN: (call 132) the server on the GPU, never measured under load before, and the
# prefill speed by prompt rows a forward, on the 27B MLX4 shape:
# - `bench --prefill-chunk C` for C = 256 (serve's default), 1,024, 2,048 (bench's default) and 4,096, prompts of
#   2k and 16k tokens;
# - `serve --device cuda` (synth now writes a tokenizer, so replies stream text) loaded by `bench concurrent` with
#   1,024-token random prompts and 128-token replies at 1, 4 and 16 streams, with serve's default chunk of 256 and
#   with 2,048, each reply checked against the same request alone (and, at 256, with "draft": false); then 64
#   streams at --parallel 64.
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
serve_load() {
  local name=$1 chunk=$2 par=$3 levels=$4; shift 4
  if [ "$(left)" -lt 70 ]; then echo "SKIP $name (budget)"; return; fi
  "$BIN" serve --device cuda --model $M --port 8321 --parallel "$par" --prefill-chunk "$chunk" \
    > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  echo "$name server up=$up after ${i} polls"
  [ $up = 1 ] && step "$name" 60 "$BIN" bench concurrent --url http://127.0.0.1:8321 --levels "$levels" \
    --prompt-tokens 1024 --max-tokens 128 --prompt-vocab 248000 "$@"
  kill $pid; wait $pid 2> /dev/null
  grep -E "^\||DIFF|rror" "$OUT/$name.log" | sed "s/^/$name /"
  grep -E "panicked|rror" "$OUT/$name-serve.log" | head -5 | sed "s/^/$name-serve /"
}
serve_load serve-c256 256 16 1,4,16 --alone --serial
serve_load serve-c2048 2048 16 1,4,16 --alone
serve_load serve-c2048-p64 2048 64 64
rm -rf $M
finish "$FINAL"
