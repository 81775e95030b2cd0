#!/bin/bash
# gpu_attn.sh FINAL BUDGET_S OLD NEW (call 24): backend-ops and every equality suite with NEW, then the full sweep
# of OLD and NEW on the 27B MLX 4-bit shape with a 16k-token prompt (prefill, then decode at that context).
FINAL=${1:?out dir}; BUDGET=${2:-280}; OLD=${3:?old binary}; NEW=${4:?new binary}
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for b in new old; do
  bin=$OLD; [ $b = new ] && bin=$NEW
  step 27b-mlx4-$b 75 "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 16384
  grep -E 'prefill|decode|streams|round of' "$OUT/27b-mlx4-$b.log" | sed "s/^/$b /"
done
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
