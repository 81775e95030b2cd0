#!/bin/bash
# gpu_attn_block3.sh FINAL BUDGET_S BIN OLD: call 76, attn_block with a warp's columns' tile statistics side by side
# and prompt slices of whole blocks (BIN) against call 74-75's attn_block (OLD, f250427) and attn_chunk
# (TENSORFOLD_CUDA_ATTN_BLOCK=0): every check and the tiny fixtures' shas with BIN; 27B MLX4 quick benches with
# a 16k prefill, in turn; BIN's profile of that prefill; the whole 27B bf16 shape's 16k prefill, each way.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
tiny_shas "$BIN"
pre() {  # pre NAME BIN MODEL LENS ENV...
  local name=$1 bin=$2 model=$3 lens=$4; shift 4
  step "$name" 50 env "$@" "$bin" bench --device cuda --model "$model" --decode-tokens 16 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode, 1 stream \||round of' "$OUT/$name.log" | cut -c1-100 | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pre q-old-1 "$OLD" /dev/shm/s27m4 16384
pre q-new-1 "$BIN" /dev/shm/s27m4 16384
pre q-chunk "$BIN" /dev/shm/s27m4 16384 TENSORFOLD_CUDA_ATTN_BLOCK=0
pre q-old-2 "$OLD" /dev/shm/s27m4 16384
pre q-new-2 "$BIN" /dev/shm/s27m4 16384
step prof-new 50 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 \
  --repeat 1 --quick --prefill-lens 16384
sed -n '/profile of the 16384/,/^launches/p' "$OUT/prof-new.log" | head -14 | sed "s/^/prof-new /"
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre bf16-chunk "$BIN" /dev/shm/s27b 16384 TENSORFOLD_CUDA_ATTN_BLOCK=0
pre bf16-old "$OLD" /dev/shm/s27b 16384
pre bf16-new "$BIN" /dev/shm/s27b 16384
rm -rf /dev/shm/s27b
finish "$FINAL"
