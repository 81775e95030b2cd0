#!/bin/bash
# gpu_mma.sh BIN OUT BUDGET_S: on the GPU machine, the tensor-core projections in one call: backend-ops test and
# equality suites on fixtures, then 27B MLX 4-bit with the CUDA-core kernels (TENSORFOLD_CUDA_MMA=0) and the
# tensor-core ones side by side, a profile of decode rounds, 9B MLX 4-bit and 9B bf16 with the transformers peer.
# Each step is skipped once the budget is spent.
BIN=${1:?binary}; FINAL=${2:?out dir}; BUDGET=${3:-500}
# Logs are written here and joined into FINAL/all.log at the end (few files come back from the machine).
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
step check-ops 60 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
step check-mlx4 40 "$BIN" check --device cuda --quick --model fixtures/tiny-mlx-4bit
step check-coder 40 "$BIN" check --device cuda --quick --model models/tensorfold-coder-tiny
grep -hE "^backend-ops|^oracle|cases,|equal|^FAIL|^DIFF|^error|panicked" "$OUT"/check-*.log | grep -v "^ok" | head -20
step synth-27b-mlx4 150 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
step bench-27b-mlx4-cudacores 60 env TENSORFOLD_CUDA_MMA=0 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
step bench-27b-mlx4 60 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
step profile-27b-mlx4 40 env TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /tmp/s27m4 --decode-tokens 8 --repeat 1 --prefill-lens 2048
rm -rf /tmp/s27m4
step synth-9b-mlx4 60 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
step bench-9b-mlx4 45 "$BIN" bench --device cuda --model /tmp/s9m4 --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384,32768
rm -rf /tmp/s9m4
step synth-9b-bf16 150 "$BIN" synth --shape 9b --format bf16 --out /tmp/s9b
step bench-9b-bf16 45 "$BIN" bench --device cuda --model /tmp/s9b --decode-tokens 32 --repeat 2 --prefill-lens 2048,16384
step peer-9b-bf16 60 python3 crates/tensorfold-cuda/bench/peer_transformers.py /tmp/s9b 32
for f in "$OUT"/bench-*.log "$OUT"/profile-*.log "$OUT"/peer-*.log; do [ -f "$f" ] && { echo "== $(basename $f)"; grep -E "^\||copy|model:|error|Error|panicked" "$f" | tail -22; }; done
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
