#!/bin/bash
# gpu_final130.sh FINAL BUDGET_S BIN: (call 130) the binary with the pipelined wgmma round kernels removed and bf16
# rounds from 9 rows on wgmma: every check, then the issue's whole table in one run: copy bandwidth, one-stream
# decode against the bound, rounds of 1 to 64 rows, aggregate decode, prefill at 2k, 16k and 32k, for the 27B and 9B
# shapes in MLX 4-bit and bf16, and the transformers + torch peer on both bf16 checkpoints. Between the sweeps, 27B
# MLX4 rounds of 4 to 8 rows on the decode kernels (TENSORFOLD_CUDA_WGMMA_MIN_ROWS=9) against the default (wgmma
# from 5 rows), twice each, alternating: call 106 compared only 8 and 16 rows.
FINAL=${1:?out dir}; BUDGET=${2:-540}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
sweep() {  # sweep NAME MODEL PREFILL_LENS
  step "$1" 150 "$BIN" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens "$3"
  grep -E "^\||copy|weights read" "$OUT/$1.log" | cut -c1-120 | sed "s/^/$1 /"
}
peer() {  # peer NAME DIR
  step "$1" 90 python3 "$(dirname "$0")/peer_transformers.py" "$2" 32
  grep -E "^\||peer load" "$OUT/$1.log" | sed "s/^/$1 /"
}
rounds() {  # rounds NAME MODEL ROWS ENV...: one quick bench of rounds of ROWS under ENV
  local name=$1 model=$2 rows=$3; shift 3
  step "$name" 25 env "$@" "$BIN" bench --device cuda --model "$model" --quick --decode-tokens 4 --repeat 1 \
    --prefill-lens 64 --round-rows "$rows"
  grep -hE "round of" "$OUT/$name.log" | cut -c1-62 | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out /dev/shm/s27m4
sweep sweep-27b-mlx4 /dev/shm/s27m4 2048,16384,32768
for r in 1 2; do
  rounds m4-few-wgmma-$r /dev/shm/s27m4 1,4,5,6,7,8 X=1
  rounds m4-few-decode-$r /dev/shm/s27m4 1,4,5,6,7,8 TENSORFOLD_CUDA_WGMMA_MIN_ROWS=9
done
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
sweep sweep-27b-bf16 /dev/shm/s27b 2048,16384,32768
peer peer-27b-bf16 /dev/shm/s27b
rm -rf /dev/shm/s27b
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out /dev/shm/s9m4
sweep sweep-9b-mlx4 /dev/shm/s9m4 2048,16384
rm -rf /dev/shm/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
sweep sweep-9b-bf16 /dev/shm/s9b 2048,16384
peer peer-9b-bf16 /dev/shm/s9b
rm -rf /dev/shm/s9b
finish "$FINAL"
