#!/bin/bash
# gpu_call174.sh FINAL BUDGET_S BIN: ran as call 174 (the H200; BENCHMARKS.md §7). Each kernel letting its successor
# be launched before it waits for its predecessor (-DTF_EARLY_TRIGGER: kernel_entry's trigger first) against main's
# order (the trigger after the wait), and, on top of the early trigger, the wgmma round kernels copying their first
# groups' weights before they wait (-DTF_WG_EARLY) and the bf16 decode kernel loading its first group's
# (-DTF_MMA_EARLY; 4-bit decode rows take project_stream.cu, which already copies early): first_check on main's
# binary, backend-ops and two fixtures' full suites on both images, then quick benches of the three alternating on
# 27B MLX4, 27B bf16 and 9B MLX4. Precompile the images into the cache first (the defines are part of its key).
FINAL=${1:?out dir}; BUDGET=${2:-420}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"  # main's kernel image is byte-identical to the one call 171 ran every check on
EARLY="TENSORFOLD_CUDA_DEFINES=-DTF_EARLY_TRIGGER"
WG="TENSORFOLD_CUDA_DEFINES=-DTF_EARLY_TRIGGER -DTF_WG_EARLY -DTF_MMA_EARLY"
for v in early wg; do
  if [ $v = early ]; then e=$EARLY; else e=$WG; fi
  step $v-check-ops 30 env "$e" "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  for f in tiny-mlx-4bit tiny-wrapper-bf16; do step $v-full-$f 30 env "$e" "$BIN" check --device cuda --model fixtures/$f; done
done
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^error|panicked" "$OUT"/early-*.log "$OUT"/wg-*.log
three() {
  quick "$1-main-$3" "$2" "$BIN"
  quick "$1-early-$3" "$2" "$BIN" "$EARLY"
  quick "$1-wg-$3" "$2" "$BIN" "$WG"
}
M=/dev/shm/s27m4
step synth-m4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do three m4 $M $r; done
rm -rf $M
BF=/dev/shm/s27bf
step synth-bf 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
for r in 1 2; do three bf $BF $r; done
rm -rf $BF
M9=/dev/shm/s9m4
step synth-9m4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M9
for r in 1 2; do three m9 $M9 $r; done
rm -rf $M9
finish "$FINAL"
