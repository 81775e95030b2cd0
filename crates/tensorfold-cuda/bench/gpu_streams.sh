#!/bin/bash
# gpu_streams.sh FINAL BUDGET_S NEW: call 42. The 27B MLX 4-bit full sweep with NEW, whose streams now wait for their
# prompts' prefill before the clock starts (1 stream had measured 81 tok/s against 108 for one-stream decode).
FINAL=${1:?out dir}; BUDGET=${2:-300}; NEW=${3:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
step 27b-full 150 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
grep -E 'copy|decode|streams|round of|prefill' "$OUT/27b-full.log" | sed "s/^/27b-full /"
rm -rf /tmp/s27m4
finish "$FINAL"
