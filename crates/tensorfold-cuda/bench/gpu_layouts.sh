#!/bin/bash
# gpu_layouts.sh BIN FINAL BUDGET_S: on the GPU machine, one call: backend-ops and equality checks, then the
# tensor-core projection layouts (batch 1/4 × 8/16 warps) compared on the 27B MLX 4-bit shape in one run, the
# fastest one then measured in full (27B and 9B MLX 4-bit, 9B bf16) with a profile of decode rounds.
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
best=0; BB=1; BW=8
for b in 1 4; do for w in 8 16; do
  step layout-b$b-w$w 20 env TENSORFOLD_CUDA_MMA_BATCH=$b TENSORFOLD_CUDA_MMA_WARPS=$w "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 2 --quick
  r=$(grep -m1 "decode, 1 stream" "$OUT/layout-b$b-w$w.log" | awk -F'|' '{print $3}' | awk '{print $1}')
  echo "layout batch $b warps $w: decode ${r:-?} tok/s; $(grep 'round of 16' "$OUT/layout-b$b-w$w.log")"
  if [ -n "$r" ] && awk "BEGIN{exit !($r > $best)}"; then best=$r; BB=$b; BW=$w; fi
done; done
echo "fastest layout: batch $BB warps $BW ($best tok/s)"
export TENSORFOLD_CUDA_MMA_BATCH=$BB TENSORFOLD_CUDA_MMA_WARPS=$BW
step bench-27b-mlx4 70 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
step profile-27b-mlx4 25 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 8 --repeat 1 --quick
rm -rf /tmp/s27m4
step synth-9b-mlx4 15 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
step bench-9b-mlx4 45 "$BIN" bench --device cuda --model /tmp/s9m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
rm -rf /tmp/s9m4
step synth-9b-bf16 90 "$BIN" synth --shape 9b --format bf16 --out /tmp/s9b
step bench-9b-bf16 30 "$BIN" bench --device cuda --model /tmp/s9b --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
for f in "$OUT"/bench-*.log "$OUT"/profile-*.log; do [ -f "$f" ] && { echo "== $(basename $f)"; grep -E "^\||copy|model:|error|Error|panicked" "$f" | grep -v "^| kernel\|^|---" | head -30; }; done
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
