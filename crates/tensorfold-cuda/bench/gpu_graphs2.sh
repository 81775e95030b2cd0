#!/bin/bash
# gpu_graphs2.sh FINAL BUDGET_S BIN: call 62. CUDA graphs with buffers recycled lowest address first, DeltaNet
# tails and start states from the recycled buffers, a few graph variants per kernel sequence and a first segment
# of 16 launches: the tiny fixtures' tokens with graphs on and off; every check with graphs on and one fixture's
# suite with them off (receipts compared); quick benches of the 27B MLX4, 9B MLX4 and 9B bf16 shapes on and off in
# turn, twice; segment sizes; the 27B and 9B MLX4 sweeps both ways; a trace of node updates.
FINAL=${1:?out dir}; BUDGET=${2:-540}; BIN=${3:?binary}
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
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
step 27b-trace 30 env TENSORFOLD_CUDA_GRAPH_TRACE=1 "$BIN" run --device cuda --model /dev/shm/s27m4 --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 24 --ignore-eos --no-drafts --json
echo "27b-trace: $(grep -c '^graph node' "$OUT/27b-trace.log") node updates over 24 tokens"
grep '^graph node' "$OUT/27b-trace.log" | tail -30
for i in 1 2; do
  quick 27b-g1-$i /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=1
  quick 27b-g0-$i /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
for seg in 64 256 1000; do
  quick 27b-seg$seg /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPH_SEGMENT=$seg
done
for gr in 1 0; do
  step 27b-sweep-g$gr 60 env TENSORFOLD_CUDA_GRAPHS=$gr "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
  grep -E 'copy|decode|streams|round of|prefill|graphs so far' "$OUT/27b-sweep-g$gr.log" | sed "s/^/27b-sweep-g$gr /"
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for i in 1 2; do
  quick 9b-g1-$i /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=1
  quick 9b-g0-$i /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
for gr in 1 0; do
  step 9b-sweep-g$gr 60 env TENSORFOLD_CUDA_GRAPHS=$gr "$BIN" bench --device cuda --model /dev/shm/s9m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
  grep -E 'copy|decode|streams|round of|prefill|graphs so far' "$OUT/9b-sweep-g$gr.log" | sed "s/^/9b-sweep-g$gr /"
done
rm -rf /dev/shm/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
for i in 1 2; do
  quick 9b-bf16-g1-$i /dev/shm/s9b "$BIN" TENSORFOLD_CUDA_GRAPHS=1
  quick 9b-bf16-g0-$i /dev/shm/s9b "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
rm -rf /dev/shm/s9b
finish "$FINAL"
