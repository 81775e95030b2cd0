#!/bin/bash
# gpu_cache137.sh FINAL BUDGET_S NEW OLD: (call 137) the GPU prompt cache's default size: OLD (a79868a, 1 GiB) against
# NEW (a tenth of the memory left for the KV cache), the server on the 27B MLX4 shape, in turn: 16 streams of
# 1,024-token prompts (64-token replies), each then sent again alone (equal replies; a resumed one where the cache
# kept its prompt), then the same 16 requests together again (warm), with the cache's hit counters after each run.
FINAL=${1:?out dir}; BUDGET=${2:-240}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$NEW"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --threads 16 --out $M
serve_twice old "$OLD" $M "$NEW"
serve_twice new "$NEW" $M "$NEW"
rm -rf $M
finish "$FINAL"
