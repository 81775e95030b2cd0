#!/bin/bash
# gpu_graphs.sh FINAL BUDGET_S BIN: call 61. CUDA graphs for decode rounds (TENSORFOLD_CUDA_GRAPHS=0 turns them
# off in the same binary): the tiny fixtures' tokens both ways; every check with graphs on and one fixture's suite
# with them off (its receipts compared); quick benches of the 27B MLX4, 9B MLX4 and 9B bf16 shapes on and off in
# turn, twice; graph segment sizes; the 27B MLX4 sweep both ways.
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
grep -h "graphs off" "$OUT"/*.log
all_checks "$BIN"
step check-g0-mlx4 40 env TENSORFOLD_CUDA_GRAPHS=0 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -v "^cuda:\|checks\|s)$" "$OUT/full-tiny-mlx-4bit.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-g1.txt"
grep -v "^cuda:\|checks\|s)$" "$OUT/check-g0-mlx4.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-g0.txt"
echo "receipt shas with graphs: $(wc -l < "$OUT/shas-g1.txt"), without: $(wc -l < "$OUT/shas-g0.txt"), differing: $(diff "$OUT/shas-g1.txt" "$OUT/shas-g0.txt" | grep -c '^<')"
g() { grep -E 'graphs so far' "$OUT/$1.log" | sed "s/^/$1 /"; }
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for i in 1 2; do
  quick 27b-g1-$i /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=1; g 27b-g1-$i
  quick 27b-g0-$i /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
for seg in 64 256 100000; do
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
rm -rf /dev/shm/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
for i in 1 2; do
  quick 9b-bf16-g1-$i /dev/shm/s9b "$BIN" TENSORFOLD_CUDA_GRAPHS=1
  quick 9b-bf16-g0-$i /dev/shm/s9b "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
rm -rf /dev/shm/s9b
finish "$FINAL"
