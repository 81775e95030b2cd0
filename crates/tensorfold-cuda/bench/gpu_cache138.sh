#!/bin/bash
# gpu_cache138.sh FINAL BUDGET_S NEW OLD: (call 138) the GPU prompt cache: OLD (a79868a: 1 GiB, snapshots at the
# prompt's end and one row before) against NEW (a tenth of the memory left for the KV cache; the snapshot one row
# before the end only), the server on the 27B MLX4 shape, in turn: 16 streams of 1,024-token prompts (64-token
# replies), each then sent again alone (equal replies; a resumed one where the cache kept its prompt), then the
# same 16 requests together again (warm), with the cache's hit counters after each run.
FINAL=${1:?out dir}; BUDGET=${2:-240}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
serve_twice() {  # serve_twice NAME BIN
  local name=$1 bin=$2
  if [ "$(left)" -lt 50 ]; then echo "SKIP $name (budget)"; return; fi
  "$bin" serve --device cuda --model $M --port 8321 > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  if [ $up = 1 ]; then
    for run in cold warm; do
      local alone=""; [ $run = cold ] && alone=--alone
      step "$name-$run" 40 "$NEW" bench concurrent --url http://127.0.0.1:8321 --levels 16 --prompt-tokens 1024 \
        --max-tokens 64 --prompt-vocab 248000 --seed 5 $alone
      curl -s localhost:8321/metrics | grep -E "^tensorfold_prompt_cache" > "$OUT/$name-$run-metrics.log"
    done
  fi
  kill $pid; wait $pid 2> /dev/null
  grep -hE "KV cache" "$OUT/$name-serve.log" | sed "s/^/$name-serve /"
  for run in cold warm; do
    grep -E "^\| [0-9]|DIFF|rror" "$OUT/$name-$run.log" | sed "s/^/$name-$run /"
    sed "s/^/$name-$run-metrics /" "$OUT/$name-$run-metrics.log" 2> /dev/null
  done
  grep -E "panicked|rror" "$OUT/$name-serve.log" | head -4 | sed "s/^/$name-serve /"
}
serve_twice old "$OLD"
serve_twice new "$NEW"
rm -rf $M
finish "$FINAL"
