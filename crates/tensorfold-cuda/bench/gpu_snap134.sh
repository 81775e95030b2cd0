#!/bin/bash
# gpu_snap134.sh FINAL BUDGET_S NEW OLD: (call 134) prompt-cache snapshots on the device (NEW) against host copies
# (OLD, 87f3615, call 133's binary), the server on the 27B MLX4 shape, in turn: one stream of a 1,024-token prompt
# (a snapshot at token 1,024 and one at the end), then 128-token prompts with 256-token replies at 1 and 16 streams.
# NEW's long reply is checked against the same request sent again alone (it resumes from NEW's snapshot).
FINAL=${1:?out dir}; BUDGET=${2:-140}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
serve_load() {  # serve_load NAME BIN LONG_BENCH_FLAGS...
  local name=$1 bin=$2; shift 2
  if [ "$(left)" -lt 40 ]; then echo "SKIP $name (budget)"; return; fi
  "$bin" serve --device cuda --model $M --port 8321 > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  if [ $up = 1 ]; then
    step "$name-long" 20 "$bin" bench concurrent --url http://127.0.0.1:8321 --levels 1 --prompt-tokens 1024 \
      --max-tokens 128 --prompt-vocab 248000 "$@"
    step "$name-decode" 20 "$bin" bench concurrent --url http://127.0.0.1:8321 --levels 1,16 --prompt-tokens 128 \
      --max-tokens 256 --prompt-vocab 248000 --seed 99
  fi
  kill $pid; wait $pid 2> /dev/null
  grep -E "^\| [0-9]|DIFF|rror" "$OUT/$name-long.log" "$OUT/$name-decode.log" | sed "s|^$OUT/||"
  grep -E "panicked|rror" "$OUT/$name-serve.log" | head -4 | sed "s/^/$name-serve /"
}
serve_load old "$OLD"
serve_load new "$NEW" --alone
rm -rf $M
finish "$FINAL"
