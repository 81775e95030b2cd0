#!/bin/bash
# gpu_tiles.sh FINAL BUDGET_S NEW OLD: on the GPU machine, one call: backend-ops and every equality suite with NEW,
# then quick decode, 16-row rounds and a 2k prefill on the 27B and 9B MLX 4-bit shapes with OLD (row-major 4-bit
# weights, plain launches), NEW, and NEW with programmatic dependent launch off (TENSORFOLD_CUDA_PDL=0), run
# alternately twice; a profile of NEW.
FINAL=${1:?out dir}; BUDGET=${2:-480}; NEW=${3:?new binary}; OLD=${4:?old binary}
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
all_checks "$NEW"
quick() {  # quick NAME MODEL BIN [ENV...]
  local name=$1 model=$2 bin=$3; shift 3
  step "$name" 60 env "$@" "$bin" bench --device cuda --model "$model" --decode-tokens 16 --repeat 2 --quick --prefill-lens 2048
  grep -E 'prefill|decode, 1|round of|loaded' "$OUT/$name.log" | sed "s/^/$name /"
}
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
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
