#!/bin/bash
# gpu_call169.sh FINAL BUDGET_S BIN: the issue's whole table with the final binary (gpu_call143.sh's sweeps and
# peers without its server runs): every check, then copy bandwidth, decode against the bound, rounds of 1 to 64
# rows, aggregate decode and prefill 2k/16k/32k for 27B and 9B in MLX 4-bit and bf16, and transformers beside the
# bf16 shapes. The 27B bf16 rows last: if the budget runs out, they are the ones call 168 measured in part.
FINAL=${1:?out dir}; BUDGET=${2:-540}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
sweep sweep-27b-mlx4 $M 2048,16384,32768 "$BIN"
rm -rf $M
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out /dev/shm/s9m4
sweep sweep-9b-mlx4 /dev/shm/s9m4 2048,16384 "$BIN"
rm -rf /dev/shm/s9m4
step synth-9b-bf16 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out /dev/shm/s9b
sweep sweep-9b-bf16 /dev/shm/s9b 2048,16384 "$BIN"
peer peer-9b-bf16 /dev/shm/s9b
rm -rf /dev/shm/s9b
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
sweep sweep-27b-bf16 /dev/shm/s27b 2048,16384,32768 "$BIN"
peer peer-27b-bf16 /dev/shm/s27b
rm -rf /dev/shm/s27b
finish "$FINAL"
