#!/bin/bash
# gpu_sums.sh FINAL BUDGET_S NEW OLD: call 82, the `_w8` weight stream reading x's two 32-column sums of a group in
# one 8-byte load (NEW) against call 81's binary (OLD, whose `_w8` kernels are main's at 44f7fde): every check and
# the tiny fixtures' shas with NEW; 27B and 9B MLX4 quick benches alternating, three rounds each. The change left
# main after call 82 (within noise): NEW needs bench/logs/call82/sums_load.patch applied.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?binary}; OLD=${4:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
alternate q /dev/shm/s27m4 3 "$OLD" "$NEW"
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /dev/shm/s9m4
alternate n /dev/shm/s9m4 3 "$OLD" "$NEW"
rm -rf /dev/shm/s9m4
finish "$FINAL"
