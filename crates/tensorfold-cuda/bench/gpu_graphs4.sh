#!/bin/bash
# gpu_graphs4.sh FINAL BUDGET_S BIN: call 64, CUDA graphs with kernel-written KV page tables and the bench's warm
# rounds: the tiny fixtures' tokens with graphs on and off (64 tokens, and 300 so the page table grows past 16
# pages); every check with graphs on and one fixture's suite with them off (receipts compared); the 27B MLX4, 9B
# MLX4, 9B bf16 and whole 27B bf16 sweeps with graphs on and off.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
for m in tiny-mlx-4bit tiny-wrapper-bf16; do
  for n in 64 300; do
    for g in 1 0; do
      step run-$m-$n-g$g 20 env TENSORFOLD_CUDA_GRAPHS=$g "$BIN" run --device cuda --model fixtures/$m \
        --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens $n --ignore-eos --json
      echo "run-$m-$n-g$g $(tail -1 "$OUT/run-$m-$n-g$g.log" | grep -o '"token_sha":"[0-9a-f]*"')"
    done
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
sweep 27b-sweep-g1 /dev/shm/s27m4 1
sweep 27b-sweep-g0 /dev/shm/s27m4 0
sweep 27b-sweep-g1b /dev/shm/s27m4 1
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
sweep 9b-sweep-g1 /dev/shm/s9m4 1
sweep 9b-sweep-g0 /dev/shm/s9m4 0
sweep 9b-sweep-g1b /dev/shm/s9m4 1
rm -rf /dev/shm/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
sweep 9b-bf16-sweep-g1 /dev/shm/s9b 1
sweep 9b-bf16-sweep-g0 /dev/shm/s9b 0
rm -rf /dev/shm/s9b
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
sweep 27b-bf16-sweep-g1 /dev/shm/s27b 1
sweep 27b-bf16-sweep-g0 /dev/shm/s27b 0
rm -rf /dev/shm/s27b
finish "$FINAL"
