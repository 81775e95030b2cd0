#!/bin/bash
# gpu_call161.sh FINAL BUDGET_S BIN: the review tidy of 9d1c8ca (DeltaNet slot helpers, one in-order warp-total sum)
# checked on the GPU (every check, the tiny shas); the measurement switch TF_FRESH_GROUPS (a 4-bit group's sum
# starts from nothing: mma.sync's first C −0, wgmma's scale-d off; TENSORFOLD_CUDA_DEFINES) checked too (backend-ops,
# whose zero-sign rows compare every kernel family's signed zeros, tiny-mlx-4bit's suite, the tiny shas) and timed
# against the default in turn on the 27B MLX4 shape; then the issue's table for the 27B shapes (call 143's sweeps).
FINAL=${1:?out dir}; BUDGET=${2:-540}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
F="TENSORFOLD_CUDA_DEFINES=-DTF_FRESH_GROUPS"
step fresh-ops 60 env $F "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
step fresh-4bit 40 env $F "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
grep -hE "^backend-ops|^oracle|cases,|^FAIL|zero-sign rows: the decode" "$OUT"/fresh-*.log | head -12 | sed "s/^/fresh /"
for m in tiny-mlx-4bit tiny-wrapper-bf16; do
  step fresh-run-$m 20 env $F "$BIN" run --device cuda --model fixtures/$m --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 300 --ignore-eos --json
  echo "fresh-run-$m $(tail -1 "$OUT/fresh-run-$m.log" | grep -o '"token_sha":"[0-9a-f]*"')"
done
sweep() {  # sweep NAME MODEL PREFILL_LENS
  step "$1" 150 "$BIN" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens "$3"
  grep -E "^\||copy|weights read" "$OUT/$1.log" | cut -c1-120 | sed "s/^/$1 /"
}
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m4-default-$r $M "$BIN"
  quick m4-fresh-$r $M "$BIN" $F
done
sweep sweep-27b-mlx4 $M 2048,16384,32768
rm -rf $M
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
sweep sweep-27b-bf16 /dev/shm/s27b 2048,16384,32768
rm -rf /dev/shm/s27b
finish "$FINAL"
