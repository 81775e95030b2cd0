#!/bin/bash
# gpu_last.sh FINAL BUDGET_S NEW: call 35. Every check with the final binary (the equality suite now holds a request
# sampled at temperature alone, which the engine draws on the device), and its quick run on the 27B MLX 4-bit shape.
FINAL=${1:?out dir}; BUDGET=${2:-300}; NEW=${3:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
quick 27b-final /tmp/s27m4 "$NEW"
rm -rf /tmp/s27m4
finish "$FINAL"
