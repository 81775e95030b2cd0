#!/bin/bash
# gpu_tiles.sh FINAL BUDGET_S NEW OLD: on the GPU machine, one call: backend-ops and every equality suite with NEW,
# then quick decode, 16-row rounds and a 2k prefill on the 27B and 9B MLX 4-bit shapes with OLD (row-major 4-bit
# weights, plain launches), NEW, and NEW with programmatic dependent launch off (TENSORFOLD_CUDA_PDL=0), run
# alternately twice; a profile of NEW.
FINAL=${1:?out dir}; BUDGET=${2:-480}; NEW=${3:?new binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-old-$i /tmp/s27m4 "$OLD"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
  quick 27b-nopdl-$i /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_PDL=0
done
step profile-new 40 env TENSORFOLD_CUDA_PROFILE=1 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
quick 9b-old /tmp/s9m4 "$OLD"
quick 9b-new /tmp/s9m4 "$NEW"
quick 9b-nopdl /tmp/s9m4 "$NEW" TENSORFOLD_CUDA_PDL=0
rm -rf /tmp/s9m4
finish "$FINAL"
