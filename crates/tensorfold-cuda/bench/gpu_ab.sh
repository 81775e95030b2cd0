#!/bin/bash
# gpu_ab.sh FINAL BUDGET_S BIN VARIANT...: on the GPU machine, one call: backend-ops and every equality suite with
# BIN, then quick runs (decode, 16-row rounds, 2k prefill) of every VARIANT (a binary, or a wrapper running one under
# switches; named by its file name) in turn, twice, on the 27B MLX 4-bit shape, and once each on the 9B MLX 4-bit one.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}; shift 3
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do for v in "$@"; do quick "27b-$(basename $v)-$i" /tmp/s27m4 "$v"; done; done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
for v in "$@"; do quick "9b-mlx4-$(basename $v)" /tmp/s9m4 "$v"; done
rm -rf /tmp/s9m4
finish "$FINAL"
