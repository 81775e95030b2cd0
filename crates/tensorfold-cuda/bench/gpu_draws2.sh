#!/bin/bash
# gpu_draws2.sh FINAL BUDGET_S NEW OLD STARTPROF: call 32. Every check with NEW (generate now draws the first token
# inside the prompt's time); NEW against NEW with TENSORFOLD_HOST_DRAWS=1 in turn on the 27B and 9B MLX 4-bit
# shapes, OLD (last session's final binary) beside them; and the 16k-token prefill profiled kernel by kernel with
# STARTPROF (the kernels of 0c4e1bb, with this bench's per-prefill profile) and NEW, for the 1,091 → 866 tok/s of
# call 31.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?new binary}; OLD=${4:?old binary}; STARTPROF=${5:?start binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
grep -h "keyed draws" "$OUT"/check-ops.log
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-device-$i /tmp/s27m4 "$NEW"
  quick 27b-host-$i /tmp/s27m4 "$NEW" TENSORFOLD_HOST_DRAWS=1
done
quick 27b-old /tmp/s27m4 "$OLD"
for b in start new; do
  bin=$NEW; [ $b = start ] && bin=$STARTPROF
  step 16k-prof-$b 90 env TENSORFOLD_CUDA_PROFILE=1 "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 4 --repeat 1 --quick --prefill-lens 16384
  sed -n '/profile of the 16384/,/^launches/p' "$OUT/16k-prof-$b.log" | head -30 | sed "s/^/$b /"
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  quick 9b-device-$i /tmp/s9m4 "$NEW"
  quick 9b-host-$i /tmp/s9m4 "$NEW" TENSORFOLD_HOST_DRAWS=1
done
rm -rf /tmp/s9m4
finish "$FINAL"
