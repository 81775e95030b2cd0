#!/bin/bash
# gpu_call174.sh FINAL BUDGET_S BIN: each kernel lets its successor be launched before it waits for its predecessor
# (kernel_entry's trigger first, the default now) against the trigger after the wait (-DTF_LATE_TRIGGER, as before),
# and, on top of the early trigger, the wgmma round kernels copying their first groups' weights before they wait
# (-DTF_WG_EARLY): every check on the new default and on TF_WG_EARLY, then quick benches of the three alternating on
# 27B MLX4, 9B MLX4 and 27B bf16. The three kernel images come precompiled in the cache (defines are in its key).
FINAL=${1:?out dir}; BUDGET=${2:-420}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
step wg-check-ops 60 env TENSORFOLD_CUDA_DEFINES=-DTF_WG_EARLY "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
step wg-full-mlx 40 env TENSORFOLD_CUDA_DEFINES=-DTF_WG_EARLY "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
step wg-full-bf16 40 env TENSORFOLD_CUDA_DEFINES=-DTF_WG_EARLY "$BIN" check --device cuda --model fixtures/tiny-wrapper-bf16
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^error|panicked" "$OUT"/wg-*.log | sed 's/^/wg /'
three() {
  quick "$1-early-$3" "$2" "$BIN"
  quick "$1-late-$3" "$2" "$BIN" TENSORFOLD_CUDA_DEFINES=-DTF_LATE_TRIGGER
  quick "$1-wg-$3" "$2" "$BIN" TENSORFOLD_CUDA_DEFINES=-DTF_WG_EARLY
}
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2 3; do three m4 $M $r; done
rm -rf $M
M9=/dev/shm/s9m4
step synth-9m4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
for r in 1 2; do three m9 $M9 $r; done
rm -rf $M9
BF=/dev/shm/s27bf
step synth-bf 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
for r in 1 2; do three bf $BF $r; done
rm -rf $BF
finish "$FINAL"
