#!/bin/bash
# gpu_drafts136.sh FINAL BUDGET_S BIN: (call 136) drafting on the GPU and where the engine thread's time goes.
# - `bench --drafts --device cuda` on the built-in model (bf16, then its MLX 4-bit copy): three prompt kinds, 5
#   drafted and 5 plain greedy replies of 256 tokens alternating, drafters both / copies / mtp / none (control);
# - `run --device cuda` on the 27B MLX4 shape, a 1,024-token prompt and 128 tokens, drafted and not, with the engine
#   thread's phases (the keep queued before the draws now has its own phase, the walk after them another);
# - the server on the same shape under 16 streams of 1,024-token prompts with prompt chunks of 512 and of 2,048
#   rows (the GPU default): what the chunk size trades between time to first token and the gaps between tokens.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for m in tensorfold-coder-tiny tensorfold-coder-tiny-mlx-4bit; do
  for d in both copies mtp none; do
    [ $m != tensorfold-coder-tiny ] && [ $d != both ] && continue
    step drafts-$m-$d 30 "$BIN" bench --drafts --device cuda --model models/$m --decode-tokens 256 --repeat 5 \
      --drafters $d
    grep -E "^\| (rewrite|new|prose)|^engine|^Error|rror" "$OUT/drafts-$m-$d.log" | cut -c1-160 | sed "s/^/drafts-$m-$d /"
  done
done
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
ids=$(python3 -c "print(','.join(str((i * 7919 + 13) % 248000) for i in range(1024)))")
for mode in drafts no-drafts; do
  flag=""; [ $mode = no-drafts ] && flag=--no-drafts
  step run-$mode 30 "$BIN" run --device cuda --model $M --prompt-ids "$ids" --max-tokens 128 --ignore-eos --json $flag
  grep -E "^prompt:|^engine thread" "$OUT/run-$mode.log" | sed "s/^/run-$mode /"
done
serve_load() {  # serve_load NAME SERVE_FLAGS
  local name=$1 flags=$2
  if [ "$(left)" -lt 50 ]; then echo "SKIP $name (budget)"; return; fi
  "$BIN" serve --device cuda --model $M --port 8321 $flags > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  if [ $up = 1 ]; then
    step "$name" 40 "$BIN" bench concurrent --url http://127.0.0.1:8321 --levels 1,16 --prompt-tokens 1024 \
      --max-tokens 128 --prompt-vocab 248000 --seed 5
    curl -s localhost:8321/metrics | grep -E "^tensorfold_(engine_thread|rounds_total)" > "$OUT/$name-metrics.log"
  fi
  kill $pid; wait $pid 2> /dev/null
  grep -E "^\| [0-9]|DIFF|rror" "$OUT/$name.log" | sed "s/^/$name /"
  sed "s/^/$name-metrics /" "$OUT/$name-metrics.log" 2> /dev/null
  grep -E "panicked|rror" "$OUT/$name-serve.log" | head -4 | sed "s/^/$name-serve /"
}
serve_load serve-c512 "--prefill-chunk 512"
serve_load serve-c2048 ""
rm -rf $M
finish "$FINAL"
