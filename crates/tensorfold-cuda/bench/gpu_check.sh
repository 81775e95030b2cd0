#!/bin/bash
# gpu_check.sh BIN OUT: on the GPU machine, the backend-ops test and `check --device cuda` on every fixture
# (equality suite + float64 oracle), then a first speed reading on the 9B MLX 4-bit shape. Builds nothing.
BIN=${1:?binary}; OUT=${2:?out dir}
mkdir -p "$OUT"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
{
  date; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  ls /usr/local/cuda/lib64 2>/dev/null | grep -E 'nvrtc' ; ldconfig -p | grep -E 'libcuda.so|nvrtc' | head
} > "$OUT/env.log" 2>&1
t0=$(date +%s)
timeout 90 "$BIN" check --device cuda --ops --model fixtures/tiny-wrapper-bf16 > "$OUT/check-tiny-wrapper-bf16.log" 2>&1
echo "tiny-wrapper-bf16 (ops + full suite) rc=$? $(( $(date +%s) - t0 ))s"
for f in tiny-mlx-mixed tiny-mlx-4bit tiny-flat-f16-notok tiny-flat-f32-sharded; do
  t=$(date +%s)
  timeout 60 "$BIN" check --device cuda --model fixtures/$f > "$OUT/check-$f.log" 2>&1
  echo "$f rc=$? $(( $(date +%s) - t ))s"
done
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error" "$OUT"/check-*.log
t=$(date +%s)
timeout 60 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4 > "$OUT/synth-9b-mlx4.log" 2>&1
echo "synth 9b mlx4 rc=$? $(( $(date +%s) - t ))s"
t=$(date +%s)
timeout 120 "$BIN" bench --device cuda --model /tmp/s9m4 --decode-tokens 32 --repeat 2 --prefill-lens 512 > "$OUT/bench-9b-mlx4.log" 2>&1
echo "bench 9b mlx4 rc=$? $(( $(date +%s) - t ))s"
cat "$OUT/bench-9b-mlx4.log" | tail -20
echo "total $(( $(date +%s) - t0 ))s"
