#!/bin/bash
# gpu_graphs5.sh FINAL BUDGET_S BIN: call 65, the final binary (332efc3, send's paths as early returns): the tiny
# fixtures' tokens with graphs on and off; every check with graphs on and one fixture's suite with them off
# (receipts compared); quick 27B MLX4 benches on and off in turn; the 9B MLX4 sweep with graphs on.
FINAL=${1:?out dir}; BUDGET=${2:-230}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
for m in tiny-mlx-4bit tiny-wrapper-bf16; do
  for g in 1 0; do
    step run-$m-g$g 20 env TENSORFOLD_CUDA_GRAPHS=$g "$BIN" run --device cuda --model fixtures/$m \
      --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 300 --ignore-eos --json
    echo "run-$m-g$g $(tail -1 "$OUT/run-$m-g$g.log" | grep -o '"token_sha":"[0-9a-f]*"')"
  done
done
all_checks "$BIN"
step check-g0-mlx4 30 env TENSORFOLD_CUDA_GRAPHS=0 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -v "^cuda:\|checks\|s)$" "$OUT/full-tiny-mlx-4bit.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-g1.txt"
grep -v "^cuda:\|checks\|s)$" "$OUT/check-g0-mlx4.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-g0.txt"
echo "receipt shas with graphs: $(wc -l < "$OUT/shas-g1.txt"), without: $(wc -l < "$OUT/shas-g0.txt"), differing: $(diff "$OUT/shas-g1.txt" "$OUT/shas-g0.txt" | grep -c '^<')"
grep -h "graphs off" "$OUT"/*.log
step synth-27b-mlx4 40 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for i in 1 2; do
  quick 27b-g1-$i /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=1
  quick 27b-g0-$i /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_GRAPHS=0
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 20 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
step 9b-sweep-g1 20 "$BIN" bench --device cuda --model /dev/shm/s9m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
grep -E 'decode|streams|round of' "$OUT/9b-sweep-g1.log" | grep -v "temperature\|presence" | sed "s/^/9b-sweep-g1 /"
rm -rf /dev/shm/s9m4
finish "$FINAL"
