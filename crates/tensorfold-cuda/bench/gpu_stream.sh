#!/bin/bash
# gpu_stream.sh BIN FINAL BUDGET_S: on the GPU machine, one call: backend-ops and equality checks, then the 4-bit
# weight stream's layouts (TENSORFOLD_CUDA_MMA_STAGES 0 = direct loads, 4 or 8 stages, 2 = 4 stages of two tiles) and
# the fused kernels (TENSORFOLD_CUDA_FUSE) on the 27B MLX 4-bit shape in one run, the fastest measured in full
# (27B and 9B MLX 4-bit, 9B bf16) with a profile.
BIN=${1:?binary}; FINAL=${2:?out dir}; BUDGET=${3:-420}
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
step check-ops 60 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
step check-mlx4 30 "$BIN" check --device cuda --quick --model fixtures/tiny-mlx-4bit
step check-coder 30 "$BIN" check --device cuda --quick --model models/tensorfold-coder-tiny
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error|panicked" "$OUT"/check-*.log | head -20
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
best=0; BEST=""
# Each variant: a label and its environment; the fastest (decode tok/s) is then measured in full.
for v in "before:TENSORFOLD_CUDA_MMA_STAGES=0 TENSORFOLD_CUDA_FUSE=0" "s4:TENSORFOLD_CUDA_MMA_STAGES=4" "default:" \
         "before:TENSORFOLD_CUDA_MMA_STAGES=0 TENSORFOLD_CUDA_FUSE=0" "s4:TENSORFOLD_CUDA_MMA_STAGES=4" "default:"; do
  label=${v%%:*}; envs=${v#*:}
  step layout-$label 20 env $envs "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 2 --quick
  r=$(grep -m1 "decode, 1 stream" "$OUT/layout-$label.log" | awk -F'|' '{print $3}' | awk '{print $1}')
  echo "$label ($envs): decode ${r:-?} tok/s; $(grep -m1 'decode, 1 stream' "$OUT/layout-$label.log" | awk -F'|' '{print $6}'); $(grep 'round of 16' "$OUT/layout-$label.log")"
  if [ -n "$r" ] && awk "BEGIN{exit !($r > $best)}"; then best=$r; BEST=$envs; fi
done
echo "fastest: $BEST ($best tok/s)"
# The full sweep runs the shipped defaults.
step bench-27b-mlx4 70 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
step profile-27b-mlx4 25 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 8 --repeat 1 --quick
rm -rf /tmp/s27m4
step synth-9b-mlx4 15 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
step bench-9b-mlx4 45 "$BIN" bench --device cuda --model /tmp/s9m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
rm -rf /tmp/s9m4
step synth-9b-bf16 90 "$BIN" synth --shape 9b --format bf16 --out /tmp/s9b
step bench-9b-bf16 30 "$BIN" bench --device cuda --model /tmp/s9b --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
rm -rf /tmp/s9b
for f in "$OUT"/bench-*.log "$OUT"/profile-*.log; do [ -f "$f" ] && { echo "== $(basename $f)"; grep -E "^\||copy|model:|error|Error|panicked" "$f" | grep -v "^|---" | head -40; }; done
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
