#!/bin/bash
# gpu_prefetch_next.sh FINAL BUDGET_S BIN: call 92. Each weight-stream launch adding 32 blocks that copy the next
# launch's first MB of weights into L2 as evict_last (TENSORFOLD_CUDA_PREFETCH_MB: 0 = off, the default) at 8, 16 and
# 32 MB against off: 27B MLX4 quick benches alternating (token shas check the bits), 9B MLX4 at 16 MB against off,
# then backend-ops and tiny-mlx-4bit's suite with it on. Needs bench/logs/call92/prefetch_next_weights.patch applied
# and a kernel cache filled with it.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step check-pf 40 env TENSORFOLD_CUDA_PREFETCH_MB=16 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases," "$OUT/check-pf.log" | head | sed "s/^/check-pf /"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  quick q-off-$r /dev/shm/s27m4 "$BIN"
  quick q-pf8-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_PREFETCH_MB=8
  quick q-pf16-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_PREFETCH_MB=16
  quick q-pf32-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_PREFETCH_MB=32
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
for r in 1 2; do
  quick q9-off-$r /dev/shm/s9m4 "$BIN"
  quick q9-pf16-$r /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_PREFETCH_MB=16
done
rm -rf /dev/shm/s9m4
finish "$FINAL"
