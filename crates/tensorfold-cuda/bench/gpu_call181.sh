#!/bin/bash
# gpu_call181.sh FINAL BUDGET_S BIN: the issue's table with the L2 look-ahead on by default (8 MiB): every check
# (backend-ops, every fixture's full suite with its oracle, the built-in model, the tiny shas), then gpu_call169.sh's
# four sweeps (copy bandwidth, decode against the bound, rounds of 1 to 64 rows, aggregate decode, prefills) without
# the transformers peers, which the look-ahead cannot move (call 176 ran them).
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
# `shape NAME SHAPE FORMAT SYNTH_S LENS`: a synthetic checkpoint, its sweep, then it is removed.
shape() {
  local d=/dev/shm/$1
  step "synth-$1" "$4" "$BIN" synth --shape "$2" --format "$3" --threads 16 --out "$d"
  sweep "sweep-$1" "$d" "$5" "$BIN"
  rm -rf "$d"
}
shape 27b-mlx4 27b mlx4 60 2048,16384,32768
shape 9b-mlx4 9b mlx4 40 2048,16384
shape 27b-bf16 27b bf16 150 2048,16384,32768
shape 9b-bf16 9b bf16 60 2048,16384
finish "$FINAL"
