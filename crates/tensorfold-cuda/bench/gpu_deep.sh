#!/bin/bash
# gpu_deep.sh FINAL BUDGET_S BIN: call 57. The weight stream's depth chosen per launch (project.rs launch_stages):
# every check with the default; quick runs on the 27B MLX4 shape with TENSORFOLD_CUDA_DEEP = 0 (the old choice:
# 4 stages everywhere), 2, 4 (the default), 8 and 1000 (8 stages for every launch of up to 8 rows), in turn,
# twice; 9-16-row rounds deepened too (DEEP_ROWS=16); a profile per shape with 0 and 4; the 9B MLX4 shape with 0
# and 4; and the room in /dev/shm and on disk (for a whole 27B bf16 checkpoint).
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
df -h /dev/shm /tmp; free -g
all_checks "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  for d in 0 2 4 8 1000; do quick 27b-deep$d-$i /tmp/s27m4 "$BIN" TENSORFOLD_CUDA_DEEP=$d; done
done
quick 27b-deep8-rows16 /tmp/s27m4 "$BIN" TENSORFOLD_CUDA_DEEP=8 TENSORFOLD_CUDA_DEEP_ROWS=16
for d in 0 4; do
  step 27b-prof-deep$d 40 env TENSORFOLD_CUDA_DEEP=$d TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda \
    --model /tmp/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  grep -E "^\| project_stream|round of" "$OUT/27b-prof-deep$d.log" | head -24 | sed "s/^/prof-deep$d /"
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  for d in 0 4; do quick 9b-deep$d-$i /tmp/s9m4 "$BIN" TENSORFOLD_CUDA_DEEP=$d; done
done
rm -rf /tmp/s9m4
finish "$FINAL"
