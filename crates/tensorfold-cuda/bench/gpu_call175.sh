#!/bin/bash
# gpu_call175.sh FINAL BUDGET_S BIN: the early weight loads without call 174's early trigger, and with a bounded one.
# Call 174 (the H200) found every kernel triggering first (-DTF_EARLY_TRIGGER) 5-6% slower in 1-row rounds, while
# the bf16 decode kernel's early loads (-DTF_MMA_EARLY, on top of it) took 27B bf16 1-row rounds from 15.05 to 14.05
# ms and the wgmma rounds' early copies (-DTF_WG_EARLY) 16-row rounds 2% down. This times, alternating with main:
#   loads: -DTF_WG_EARLY -DTF_MMA_EARLY, main's trigger (after the wait) everywhere;
#   small: the same plus -DTF_SMALL_FIRST (small kernels trigger first, the decode and round projections after
#          their wait: a projection launches behind the small kernel before it, nothing further ahead).
# Backend-ops and two fixtures' full suites on both images first. Precompile both into the cache.
FINAL=${1:?out dir}; BUDGET=${2:-330}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"  # main's kernel image is byte-identical to the one call 171 ran every check on
LOADS="TENSORFOLD_CUDA_DEFINES=-DTF_WG_EARLY -DTF_MMA_EARLY"
SMALL="TENSORFOLD_CUDA_DEFINES=-DTF_SMALL_FIRST -DTF_WG_EARLY -DTF_MMA_EARLY"
image_checks loads "$BIN" "$LOADS"
image_checks small "$BIN" "$SMALL"
BF=/dev/shm/s27bf
step synth-bf 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
alternate_images bf $BF 2 "$BIN" loads "$LOADS" small "$SMALL"
rm -rf $BF
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
alternate_images m4 $M 2 "$BIN" loads "$LOADS" small "$SMALL"
rm -rf $M
M9=/dev/shm/s9m4
step synth-9m4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
alternate_images m9 $M9 2 "$BIN" loads "$LOADS" small "$SMALL"
rm -rf $M9
finish "$FINAL"
