#!/bin/bash
# gpu_graphs3.sh FINAL BUDGET_S BIN: call 63, the committed CUDA graphs (c3a239b and its review): the tiny fixtures'
# tokens with graphs on and off; every check with graphs on and one fixture's suite with them off (receipts
# compared); a trace of node updates in 24 tokens of 27B MLX4 decode; quick benches of the 27B MLX4, 9B MLX4 and 9B
# bf16 shapes on and off in turn, twice; their sweeps both ways (rounds of 1 to 64 rows, 1 to 64 streams); the
# whole 27B bf16 shape last, if the budget allows.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
for m in tiny-mlx-4bit tiny-wrapper-bf16; do
  for g in 1 0; do
    step run-$m-g$g 20 env TENSORFOLD_CUDA_GRAPHS=$g "$BIN" run --device cuda --model fixtures/$m \
      --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 64 --ignore-eos --json
    echo "run-$m-g$g $(tail -1 "$OUT/run-$m-g$g.log" | grep -o '"token_sha":"[0-9a-f]*"')"
  done
done
all_checks "$BIN"
step check-g0-mlx4 40 env TENSORFOLD_CUDA_GRAPHS=0 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -v "^cuda:\|checks\|s)$" "$OUT/full-tiny-mlx-4bit.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-g1.txt"
grep -v "^cuda:\|checks\|s)$" "$OUT/check-g0-mlx4.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-g0.txt"
echo "receipt shas with graphs: $(wc -l < "$OUT/shas-g1.txt"), without: $(wc -l < "$OUT/shas-g0.txt"), differing: $(diff "$OUT/shas-g1.txt" "$OUT/shas-g0.txt" | grep -c '^<')"
grep -h "graphs off" "$OUT"/*.log
sweep() {  # sweep NAME MODEL GRAPHS [PREFILL_LENS]
  step "$1" 60 env TENSORFOLD_CUDA_GRAPHS=$3 "$BIN" bench --device cuda --model "$2" --decode-tokens 16 --repeat 1 --prefill-lens "${4:-2048}"
  grep -E 'copy|decode|streams|round of|prefill|graphs so far' "$OUT/$1.log" | grep -v "temperature\|presence" | sed "s/^/$1 /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
step 27b-trace 30 env TENSORFOLD_CUDA_GRAPH_TRACE=1 "$BIN" run --device cuda --model /dev/shm/s27m4 --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 24 --ignore-eos --no-drafts --json
echo "27b-trace: $(grep -c '^graph node' "$OUT/27b-trace.log") node updates, $(grep -c '^graph build' "$OUT/27b-trace.log") builds after a first, over 24 tokens"
grep '^graph node' "$OUT/27b-trace.log" | cut -c1-160 | tail -12
for i in 1 2; do
  quick 27b-g1-$i /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=1
  quick 27b-g0-$i /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
sweep 27b-sweep-g1 /dev/shm/s27m4 1 2048,16384
sweep 27b-sweep-g0 /dev/shm/s27m4 0
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for i in 1 2; do
  quick 9b-g1-$i /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=1
  quick 9b-g0-$i /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
sweep 9b-sweep-g1 /dev/shm/s9m4 1
sweep 9b-sweep-g0 /dev/shm/s9m4 0
rm -rf /dev/shm/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
for i in 1 2; do
  quick 9b-bf16-g1-$i /dev/shm/s9b "$BIN" TENSORFOLD_CUDA_GRAPHS=1
  quick 9b-bf16-g0-$i /dev/shm/s9b "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
sweep 9b-bf16-sweep-g1 /dev/shm/s9b 1
sweep 9b-bf16-sweep-g0 /dev/shm/s9b 0
rm -rf /dev/shm/s9b
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
sweep 27b-bf16-sweep-g1 /dev/shm/s27b 1
sweep 27b-bf16-sweep-g0 /dev/shm/s27b 0
rm -rf /dev/shm/s27b
finish "$FINAL"
