#!/bin/bash
# gpu_cut.sh FINAL BUDGET_S NEW: call 37. Every check with NEW (backend-ops now compares row_top, a cut draw's best
# ranks and softmax total, bit for bit with the host's, and cut draws token for token); then NEW's quick runs with
# draws on the device against TENSORFOLD_HOST_DRAWS=1 (the logits read back, as every cut draw did before), in
# turn, on the 27B and 9B MLX 4-bit shapes: greedy, temperature 0.8, temperature 0.7 with top-k 20, top-p 0.8, and
# that with presence and repetition penalties.
FINAL=${1:?out dir}; BUDGET=${2:-400}; NEW=${3:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
grep -hE "row_top|cut draws|keyed draws|penalised" "$OUT"/check-ops.log
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-device-$i /tmp/s27m4 "$NEW"
  quick 27b-host-$i /tmp/s27m4 "$NEW" TENSORFOLD_HOST_DRAWS=1
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
quick 9b-device /tmp/s9m4 "$NEW"
quick 9b-host /tmp/s9m4 "$NEW" TENSORFOLD_HOST_DRAWS=1
rm -rf /tmp/s9m4
finish "$FINAL"
