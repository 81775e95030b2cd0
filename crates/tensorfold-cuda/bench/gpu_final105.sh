#!/bin/bash
# gpu_final105.sh FINAL BUDGET_S BIN: (call 111) the session's final binary: every check, then the 27B MLX4 sweep
# (copy bandwidth, decode against the bound, rounds of 1 to 64 rows, streams, prefill at 2k and 16k) with the wgmma
# kernel on (the default) and the rounds with it off.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
step check-wg0 40 env TENSORFOLD_CUDA_WGMMA=0 "$BIN" check --device cuda --ops --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases,|^error|panicked" "$OUT/check-wg0.log" | head -4 | sed "s/^/check-wg0 /"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
step sweep 150 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
grep -E "^\|" "$OUT/sweep.log" | cut -c1-110 | sed "s/^/sweep /"
step rounds-off 40 env TENSORFOLD_CUDA_WGMMA=0 "$BIN" bench --device cuda --model /dev/shm/s27m4 --quick \
  --decode-tokens 4 --repeat 1 --prefill-lens 64 --round-rows 1,2,4,5,8,12,16,32,64
grep -hE "round of" "$OUT/rounds-off.log" | cut -c1-52 | sed "s/^/rounds-off /"
rm -rf /dev/shm/s27m4
finish "$FINAL"
