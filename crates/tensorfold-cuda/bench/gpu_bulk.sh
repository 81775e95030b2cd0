#!/bin/bash
# gpu_bulk.sh FINAL BUDGET_S BIN: call 77, 4-bit decode weights by bulk copies (project_bulk.cu, the default for
# calls of up to 8 rows) against project_stream.cu's per-lane copies (TENSORFOLD_CUDA_BULK=0), same binary: every
# check and the tiny fixtures' shas; 27B MLX4 quick benches in turn, ring depths 4, 8 and 12, bulk copies at every
# row count (TENSORFOLD_CUDA_MMA_STAGES=3); the decode profile of
# each; 9B MLX4 quick benches each way.
# Needs bench/logs/call78/project_bulk.patch applied (the kernel and its switches left main after call 78).
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
all_checks "$BIN"
tiny_shas "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
quick q-stream-1 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK=0
quick q-bulk8-1 /dev/shm/s27m4 "$BIN"
quick q-bulk4 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK_STAGES=4
quick q-bulk12 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK_STAGES=12
quick q-bulkall /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_MMA_STAGES=3
quick q-stream-2 /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_BULK=0
quick q-bulk8-2 /dev/shm/s27m4 "$BIN"
for v in stream bulk; do
  e=TENSORFOLD_CUDA_BULK=$([ $v = stream ] && echo 0 || echo 1)
  step prof-$v 40 env $e TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 \
    --repeat 1 --quick --prefill-lens 2048
  sed -n '/profile of 8 decode rounds/,/^launches/p' "$OUT/prof-$v.log" | head -12 | sed "s/^/prof-$v /"
done
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
quick n-stream /dev/shm/s9m4 "$BIN" TENSORFOLD_CUDA_BULK=0
quick n-bulk /dev/shm/s9m4 "$BIN"
rm -rf /dev/shm/s9m4
finish "$FINAL"
