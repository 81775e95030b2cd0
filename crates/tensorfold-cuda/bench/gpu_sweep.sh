#!/bin/bash
# gpu_sweep.sh BIN OUT BUDGET_S: on the GPU machine, in one call: a quick re-check (backend-ops test, equality
# suite + oracle on two fixtures), then the speed sweep on synthetic checkpoints of the published shapes (27B and
# 9B MLX 4-bit, 9B bf16) and the transformers + torch peer on 9B bf16. Each step is skipped once the budget is spent.
BIN=${1:?binary}; OUT=${2:?out dir}; BUDGET=${3:-360}
mkdir -p "$OUT"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
step check-ops-wrapper 60 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
step check-mlx-mixed 40 "$BIN" check --device cuda --quick --model fixtures/tiny-mlx-mixed
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error" "$OUT"/check-*.log
step synth-27b-mlx4 120 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
step bench-27b-mlx4 90 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048
rm -rf /tmp/s27m4
step synth-9b-mlx4 60 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
step bench-9b-mlx4 60 "$BIN" bench --device cuda --model /tmp/s9m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384,32768
rm -rf /tmp/s9m4
step synth-9b-bf16 120 "$BIN" synth --shape 9b --format bf16 --out /tmp/s9b
step bench-9b-bf16 60 "$BIN" bench --device cuda --model /tmp/s9b --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
step peer-9b-bf16 45 python3 crates/tensorfold-cuda/bench/peer_transformers.py /tmp/s9b 32
for f in "$OUT"/bench-*.log "$OUT"/peer-*.log; do [ -f "$f" ] && { echo "== $(basename $f)"; grep -E "^\||copy|model:|error|Error" "$f" | tail -22; }; done
echo "total $(( $(date +%s) - T0 ))s"
