#!/bin/bash
# gpu_final127.sh FINAL BUDGET_S BIN: (call 127) the session's last binary (the copy ring's turn shared): every check,
# then 9B MLX4 rounds with the 64-column build off and on.
FINAL=${1:?out dir}; BUDGET=${2:-200}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
step synth-9b-mlx4 30 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for v in "WGMMA_MAX_ROWS=16" "WGMMA_MAX_ROWS=64"; do
  n=rounds9-$(echo "$v" | tr '=' '_')
  step "$n" 20 env TENSORFOLD_CUDA_$v "$BIN" bench --device cuda --model /dev/shm/s9m4 --quick --decode-tokens 4 \
    --repeat 1 --prefill-lens 64 --round-rows 1,16,17,32,64
  grep -hE "round of|decode, 1" "$OUT/$n.log" | cut -c1-70 | sed "s/^/$n /"
done
rm -rf /dev/shm/s9m4
finish "$FINAL"
