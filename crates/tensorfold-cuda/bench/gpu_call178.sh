#!/bin/bash
# gpu_call178.sh FINAL BUDGET_S BIN: the bf16 decode kernel's 2-row-tile build loading early too, held to two blocks
# an SM (TENSORFOLD_CUDA_DEFINES=-DTF_MMA_EARLY_NT2: 64 registers, no spills; only project_mma_bf16_nt2's SASS
# differs from main's), against main on 9B and 27B bf16 rounds of 1 to 64 rows (5 to 8 rows run that build).
# Call 176 found the unheld build at 71 registers, one block an SM, 8-row rounds 16% slower. Precompile both
# images into the carried cache. Backend-ops and two fixtures' full suites on the switch image first.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
# `rounds NAME MODEL BIN [ENV...]`: BIN's bench of MODEL (decode, rounds of 1 to 64 rows, aggregate decode, a 2k
# prefill) under ENV, logged as NAME; prints its table.
rounds() {
  local name=$1 model=$2 bin=$3; shift 3
  step "$name" 60 env "$@" "$bin" bench --device cuda --model "$model" --decode-tokens 16 --repeat 2 --prefill-lens 2048
  grep -E "^\|" "$OUT/$name.log" | cut -c1-120 | sed "s/^/$name /"
}
first_check "$BIN"
NT2="TENSORFOLD_CUDA_DEFINES=-DTF_MMA_EARLY_NT2"
image_checks nt2 "$BIN" "$NT2"
# `both SHAPE SYNTH_S`: a bf16 checkpoint of SHAPE, then main and the switch image alternating, twice.
both() {
  local b=/dev/shm/s$1bf
  step "synth-$1-bf16" "$2" "$BIN" synth --shape "$1" --format bf16 --threads 16 --out "$b"
  for r in 1 2; do
    rounds "$1-main-$r" "$b" "$BIN"
    rounds "$1-nt2-$r" "$b" "$BIN" "$NT2"
  done
  rm -rf "$b"
}
both 9b 60
both 27b 150
finish "$FINAL"
