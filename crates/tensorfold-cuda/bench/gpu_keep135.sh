#!/bin/bash
# gpu_keep135.sh FINAL BUDGET_S NEW OLD: (call 135) every slot of a round kept in one launch a layer (kv_keep and
# dn_tail_keep over all slots), keeps that do not depend on the draws queued before them, and KV snapshots in one
# launch a layer (copy_pages), NEW, against OLD (28e983e + the engine's phase times, call 134's binary): every check
# on NEW, then the 27B MLX4 sweep (decode, rounds, aggregate decode at 1 to 64 streams, 2k prefill) of each binary
# twice, alternating, the 9B MLX4 sweep once each, and the server (one stream after a 1,024-token prompt, checked
# alone; 1 and 16 streams of 256-token replies) with its /metrics phase times, OLD then NEW.
FINAL=${1:?out dir}; BUDGET=${2:-420}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
sweep() {  # sweep NAME MODEL BIN
  step "$1" 60 "$3" bench --device cuda --model "$2" --decode-tokens 32 --repeat 1 --prefill-lens 2048
  grep -E "^\| (decode, 1 stream \||round of|[0-9]+ streams|prefill)" "$OUT/$1.log" | cut -c1-100 | sed "s/^/$1 /"
}
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  sweep m27-old-$r $M "$OLD"
  sweep m27-new-$r $M "$NEW"
done
serve_load() {  # serve_load NAME BIN LONG_BENCH_FLAGS...
  local name=$1 bin=$2; shift 2
  if [ "$(left)" -lt 50 ]; then echo "SKIP $name (budget)"; return; fi
  "$bin" serve --device cuda --model $M --port 8321 > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  if [ $up = 1 ]; then
    step "$name-long" 20 "$NEW" bench concurrent --url http://127.0.0.1:8321 --levels 1 --prompt-tokens 1024 \
      --max-tokens 128 --prompt-vocab 248000 --alone
    step "$name-decode" 20 "$NEW" bench concurrent --url http://127.0.0.1:8321 --levels 1,16 --prompt-tokens 128 \
      --max-tokens 256 --prompt-vocab 248000 --seed 99
    curl -s localhost:8321/metrics | grep -E "^tensorfold_(engine_thread|rounds_total)" > "$OUT/$name-metrics.log"
  fi
  kill $pid; wait $pid 2> /dev/null
  grep -E "^\| [0-9]|DIFF|rror" "$OUT/$name-long.log" "$OUT/$name-decode.log" | sed "s|^$OUT/||"
  sed "s/^/$name-metrics /" "$OUT/$name-metrics.log" 2> /dev/null
  grep -E "panicked|rror" "$OUT/$name-serve.log" | head -4 | sed "s/^/$name-serve /"
}
serve_load serve-old "$OLD"
serve_load serve-new "$NEW"
rm -rf $M
M9=/dev/shm/s9m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --threads 16 --out $M9
sweep m9-old $M9 "$OLD"
sweep m9-new $M9 "$NEW"
rm -rf $M9
finish "$FINAL"
