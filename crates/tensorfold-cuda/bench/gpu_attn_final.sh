#!/bin/bash
# gpu_attn_final.sh FINAL BUDGET_S BIN: call 67, the final binary of the attention work (attn_chunk with the
# committed-tile paths; attn_rows removed): every check and the tiny fixtures' token shas; 27B MLX4 prefill at 2k,
# 16k and 32k; attn_chunk told 3 blocks an SM (-DTF_ATTN_BLOCKS=3, 80 registers) against the default 2, in turn;
# the whole 27B bf16 shape's 16k prefill.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
for m in tiny-mlx-4bit tiny-wrapper-bf16; do
  for n in 64 300; do
    step run-$m-$n 20 "$BIN" run --device cuda --model fixtures/$m --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens $n --ignore-eos --json
    echo "run-$m-$n $(tail -1 "$OUT/run-$m-$n.log" | grep -o '"token_sha":"[0-9a-f]*"')"
  done
done
pre() {  # pre NAME MODEL LENS [ENV...]
  local name=$1 model=$2 lens=$3; shift 3
  step "$name" 60 env "$@" "$BIN" bench --device cuda --model "$model" --decode-tokens 16 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode|round of' "$OUT/$name.log" | grep -v "temperature\|presence" | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pre 27b-final /dev/shm/s27m4 2048,16384,32768 X=1
pre 27b-blocks3 /dev/shm/s27m4 16384 TENSORFOLD_CUDA_DEFINES=-DTF_ATTN_BLOCKS=3
pre 27b-blocks2 /dev/shm/s27m4 16384 X=1
pre 27b-blocks3b /dev/shm/s27m4 16384 TENSORFOLD_CUDA_DEFINES=-DTF_ATTN_BLOCKS=3
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre 27b-bf16-final /dev/shm/s27b 16384 X=1
pre 27b-bf16-blocks3 /dev/shm/s27b 16384 TENSORFOLD_CUDA_DEFINES=-DTF_ATTN_BLOCKS=3
rm -rf /dev/shm/s27b
finish "$FINAL"
