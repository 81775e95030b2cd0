#!/bin/bash
# gpu_final_sweep118.sh FINAL BUDGET_S BIN: (call 118) the session's final binary (commit 144989a's kernels): the
# first checks, then the full sweep (copy bandwidth, decode against the bound, rounds of 1 to 64 rows, streams,
# prefill at 2k, 16k and 32k) of the 27B MLX4 and 27B bf16 shapes, then the 9B MLX4 and bf16 quick benches with a
# 16k prefill, the wgmma prompt kernel on (the default) and off.
FINAL=${1:?out dir}; BUDGET=${2:-540}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
sweep() {  # sweep NAME MODEL
  step "$1" 150 "$BIN" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384,32768
  grep -E "^\||copy|weights read" "$OUT/$1.log" | cut -c1-120 | sed "s/^/$1 /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
sweep sweep-27b-mlx4 /dev/shm/s27m4
rm -rf /dev/shm/s27m4
step synth-27b-bf16 170 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
sweep sweep-27b-bf16 /dev/shm/s27b
rm -rf /dev/shm/s27b
for f in mlx4 bf16; do
  t=1; [ $f = bf16 ] && t=16
  step synth-9b-$f 60 "$BIN" synth --shape 9b --format $f --threads $t --out /dev/shm/s9
  for v in 3 0; do
    step q9-$f-w$v 40 env TENSORFOLD_CUDA_WGMMA_GEMM=$v "$BIN" bench --device cuda --model /dev/shm/s9 \
      --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048,16384
    grep -E 'prefill|decode, 1 stream \|' "$OUT/q9-$f-w$v.log" | cut -c1-110 | sed "s/^/q9-$f-w$v /"
  done
  rm -rf /dev/shm/s9
done
finish "$FINAL"
