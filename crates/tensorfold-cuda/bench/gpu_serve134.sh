#!/bin/bash
# gpu_serve134.sh FINAL BUDGET_S NEW OLD: (call 134) the server's per-token cost on the 27B MLX4 shape.
# - `bench` (generate, the plain one-row loop) and `run --device cuda` (the engine, no prompt cache) on a 1,024-token
#   prompt, 128 tokens, with the engine thread's time by phase (forward, waiting for draws, keep, drafting, other);
# - the server, OLD (87f3615: prompt-cache snapshots copied to the host page by page, each waiting for the stream)
#   against NEW (snapshots as device copies), in turn: one stream of a 1,024-token prompt (snapshots at 1,023,
#   1,024 and the end), 128-token prompts with 256-token replies at 1 and 16 streams, and for NEW 16 streams of
#   1,024-token prompts (the worst gap between tokens while other streams' prompt chunks run). NEW's bench client
#   (ITL columns) drives both servers; NEW's long reply is checked against the same request sent again alone
#   (it resumes from NEW's snapshot), and NEW's /metrics gives the engine thread's phases under load.
FINAL=${1:?out dir}; BUDGET=${2:-300}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
step bench 40 "$NEW" bench --device cuda --model $M --quick --decode-tokens 64 --repeat 2 --round-rows 1 \
  --prefill-lens 1024
grep -E "decode, 1 stream \||round of|prefill|bound" "$OUT/bench.log" | cut -c1-110 | sed "s/^/bench /"
ids=$(python3 -c "print(','.join(str((i * 7919 + 13) % 248000) for i in range(1024)))")
for mode in drafts no-drafts; do
  flag=""; [ $mode = no-drafts ] && flag=--no-drafts
  step run-$mode 30 "$NEW" run --device cuda --model $M --prompt-ids "$ids" --max-tokens 128 --ignore-eos --json $flag
  grep -E "^prompt:|^rounds:|^engine thread" "$OUT/run-$mode.log" | sed "s/^/run-$mode /"
done
serve_load() {  # serve_load NAME BIN LONG_BENCH_FLAGS...
  local name=$1 bin=$2; shift 2
  if [ "$(left)" -lt 50 ]; then echo "SKIP $name (budget)"; return; fi
  "$bin" serve --device cuda --model $M --port 8321 > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  if [ $up = 1 ]; then
    step "$name-long" 20 "$NEW" bench concurrent --url http://127.0.0.1:8321 --levels 1 --prompt-tokens 1024 \
      --max-tokens 128 --prompt-vocab 248000 "$@"
    step "$name-decode" 20 "$NEW" bench concurrent --url http://127.0.0.1:8321 --levels 1,16 --prompt-tokens 128 \
      --max-tokens 256 --prompt-vocab 248000 --seed 99
    if [ "$bin" = "$NEW" ]; then
      curl -s localhost:8321/metrics | grep -E "engine_thread|rounds_total" > "$OUT/$name-metrics-decode.log"
      step "$name-load" 40 "$NEW" bench concurrent --url http://127.0.0.1:8321 --levels 16 --prompt-tokens 1024 \
        --max-tokens 128 --prompt-vocab 248000 --seed 5
      curl -s localhost:8321/metrics | grep -E "engine_thread|rounds_total" > "$OUT/$name-metrics-load.log"
    fi
  fi
  kill $pid; wait $pid 2> /dev/null
  grep -E "^\| [0-9]|DIFF|rror" "$OUT/$name-long.log" "$OUT/$name-decode.log" "$OUT/$name-load.log" 2> /dev/null \
    | sed "s|^$OUT/||"
  grep -hE "phase|rounds_total " "$OUT/$name"-metrics-*.log 2> /dev/null | sed "s/^/$name-metrics /"
  grep -E "panicked|rror" "$OUT/$name-serve.log" | head -4 | sed "s/^/$name-serve /"
}
serve_load old "$OLD"
serve_load new "$NEW" --alone
rm -rf $M
finish "$FINAL"
