#!/bin/bash
# gpu_diag_full.sh FINAL BUDGET_S BIN: (call 107) which switch the full tiny-mlx-4bit suite's CUDA_ERROR_INVALID_VALUE
# (call 106) follows: wgmma off, on, on without graphs, without the pool, B tiles written but no matrix on wgmma,
# then compute-sanitizer on the failing run.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
export RUST_BACKTRACE=1
for v in "WGMMA=0" "WGMMA=1" "GRAPHS=0" "POOL=0" "WGMMA_MIN_OUTPUTS=100000000" "WGMMA_MIN_ROWS=16" "FUSE=0"; do
  n=full-$(echo "$v" | tr '=' '_')
  step "$n" 20 env TENSORFOLD_CUDA_$v "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
  echo "$n: $(grep -cE '^ok ' "$OUT/$n.log") ok; $(grep -hE 'cases,|panicked|CUDA error|graphs off' "$OUT/$n.log" | head -3 | tr '\n' ' ')"
done
step full-blocking 30 env CUDA_LAUNCH_BLOCKING=1 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
echo "blocking: $(grep -hE 'cases,|panicked|CUDA error|graphs off' "$OUT/full-blocking.log" | head -3 | tr '\n' ' ')"
if command -v compute-sanitizer > /dev/null || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
  CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step sanitizer 60 "$CS" --print-limit 20 "$BIN" check --device cuda --model fixtures/tiny-mlx-4bit
  grep -E "=========|panicked|CUDA error" "$OUT/sanitizer.log" | head -40
fi
finish "$FINAL"
