#!/bin/bash
# gpu_attn_prof.sh FINAL BUDGET_S BIN: call 69, the session's final binary (score_step): every check, then a profile
# of the 27B MLX4 prefill of 16k tokens (where attention's share now stands).
FINAL=${1:?out dir}; BUDGET=${2:-170}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
step synth-27b-mlx4 40 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
step 27b-prof 40 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 16384
grep -E 'prefill|decode, 1 stream \|' "$OUT/27b-prof.log" | sed "s/^/27b-prof /"
sed -n '/profile of the 16384/,/^launches/p' "$OUT/27b-prof.log" | head -30
rm -rf /dev/shm/s27m4
finish "$FINAL"
