#!/bin/bash
# Ran (call 89) with bench/logs/call89/conv_in_recurrence.patch applied; the change lost and is not on main. The
# `apart` runs set TENSORFOLD_CUDA_DN_CONV_ROWS=0, which the patch's final code no longer reads (its switch is
# TENSORFOLD_CUDA_DN_CONV=0), so they took the new path too (599 launches a round, as `new`).
# gpu_conv.sh FINAL BUDGET_S BIN OLD: call 89. The DeltaNet recurrence convolving its rows itself in rounds of up
# to 64 rows (no dn_conv launch) against the same binary with TENSORFOLD_CUDA_DN_CONV_ROWS=0 (dn_conv first) and
# against OLD (main before the change): 27B MLX4 and 9B MLX4 quick benches alternating, an event profile, then
# backend-ops, every fixture's suite and the tiny shas with the default.
FINAL=${1:?out dir}; BUDGET=${2:-420}; BIN=${3:?binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2 3; do
  quick q-old-$r /dev/shm/s27m4 "$OLD"
  quick q-apart-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DN_CONV_ROWS=0
  quick q-new-$r /dev/shm/s27m4 "$BIN"
done
profile_decode prof-new /dev/shm/s27m4 "$BIN"
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for r in 1 2; do
  quick n-old-$r /dev/shm/s9m4 "$OLD"
  quick n-new-$r /dev/shm/s9m4 "$BIN"
done
rm -rf /dev/shm/s9m4
all_checks "$BIN"
tiny_shas "$BIN"
finish "$FINAL"
