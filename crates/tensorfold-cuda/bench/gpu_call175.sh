#!/bin/bash
# gpu_call175.sh FINAL BUDGET_S BIN: the early weight loads without the early trigger. Call 174 (the H200) found the
# early trigger slowing 1-row rounds (27B MLX4 6.34 → 6.72 ms) while the bf16 decode kernel's early loads
# (-DTF_MMA_EARLY, on top of it) sped 27B bf16 1-row rounds from 15.05 to 14.05 ms; this times main against
# -DTF_WG_EARLY -DTF_MMA_EARLY with main's trigger (after the wait), alternating on 27B bf16 then 27B MLX4, after
# backend-ops and two fixtures' full suites on the switch. Precompile that image into the cache first.
FINAL=${1:?out dir}; BUDGET=${2:-180}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
E="TENSORFOLD_CUDA_DEFINES=-DTF_WG_EARLY -DTF_MMA_EARLY"
step loads-check-ops 20 env "$E" "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
for f in tiny-mlx-4bit tiny-wrapper-bf16; do step loads-full-$f 20 env "$E" "$BIN" check --device cuda --model fixtures/$f; done
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^error|panicked" "$OUT"/loads-*.log
BF=/dev/shm/s27bf
step synth-bf 100 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $BF
for r in 1 2; do quick bf-main-$r $BF "$BIN"; quick bf-loads-$r $BF "$BIN" "$E"; done
rm -rf $BF
M=/dev/shm/s27m4
step synth-m4 30 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
for r in 1 2; do quick m4-main-$r $M "$BIN"; quick m4-loads-$r $M "$BIN" "$E"; done
rm -rf $M
finish "$FINAL"
