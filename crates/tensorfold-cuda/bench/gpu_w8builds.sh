#!/bin/bash
# gpu_w8builds.sh FINAL BUDGET_S BIN: (call 131, on an H100; the builds it compares were removed after it, their code
# is in commit 101d1c4) the one-row-tile `_w8` weight stream built for 4, 5 and 6 blocks an
# SM, chosen launch by launch (project_stream.rs w8_build; TENSORFOLD_CUDA_W8_B4_BELOW / _B6_FROM). Call 86 timed
# each build on every launch: 6 blocks won on the 27B gate/up launch (2,176 blocks) and on the 9B overall, 4 on the
# 320-block down projection, 5 on the 27B overall. Here: the checks (backend-ops compares the 4- and 6-block builds
# with direct loads bit for bit), then 27B MLX4 and 9B MLX4 quick benches of four choices in turn, two runs each,
# and the event profile of a decode round with every launch on each build.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
grep -E "_w8 build" "$OUT/first.log" | head -4
tiny_shas "$BIN"
declare -A V=(
  [b5]="X=1"
  [b6]="TENSORFOLD_CUDA_W8_B6_FROM=0"
  [b4]="TENSORFOLD_CUDA_W8_B4_BELOW=4000000000"
  [mix]="TENSORFOLD_CUDA_W8_B4_BELOW=528 TENSORFOLD_CUDA_W8_B6_FROM=1500"
)
bench_all() {  # bench_all TAG MODEL RUNS
  for r in $(seq 1 "$3"); do
    for v in b5 b6 b4 mix; do
      quick "$1-$v-$r" "$2" "$BIN" ${V[$v]}
    done
  done
}
profiles() {  # profiles TAG MODEL
  for v in b5 b6 b4; do profile_decode "prof-$1-$v" "$2" "$BIN" ${V[$v]}; done
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out /dev/shm/s27m4
bench_all m27 /dev/shm/s27m4 2
profiles m27 /dev/shm/s27m4
rm -rf /dev/shm/s27m4
step synth-9b-mlx4 30 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out /dev/shm/s9m4
bench_all m9 /dev/shm/s9m4 2
profiles m9 /dev/shm/s9m4
rm -rf /dev/shm/s9m4
finish "$FINAL"
