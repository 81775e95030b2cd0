#!/bin/bash
# gpu_draws.sh FINAL BUDGET_S NEW OLD START: call 31. Backend-ops (with the device-vs-host draw check) and every
# equality suite with NEW; then, on the 27B MLX 4-bit shape, NEW with draws on the device against NEW with
# TENSORFOLD_HOST_DRAWS=1 (the logits read back and drawn on the host, as before), alternating: greedy and
# temperature-0.8 decode, rounds of 1 and 16 rows; OLD (last session's final binary) once beside them; the full
# sweep (streams 1 to 64) both ways; the 9B MLX 4-bit quick runs both ways; and the open question of calls 25-30:
# the 27B prefill at 16k with START (the kernels of 0c4e1bb), OLD and NEW under TENSORFOLD_CUDA_PDL=0.
FINAL=${1:?out dir}; BUDGET=${2:-560}; NEW=${3:?new binary}; OLD=${4:?old binary}; START=${5:?start binary}
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
full() {  # full NAME BIN [ENV...]: the whole sweep without prompts
  local name=$1 bin=$2; shift 2
  step "$name" 120 env "$@" "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 2048
  grep -E 'decode|streams|round of' "$OUT/$name.log" | sed "s/^/$name /"
}
full 27b-full-device "$NEW"
full 27b-full-host "$NEW" TENSORFOLD_HOST_DRAWS=1
prefill() {  # prefill NAME BIN [ENV...]
  local name=$1 bin=$2; shift 2
  step "$name" 60 env "$@" "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 16384
  grep -E 'prefill' "$OUT/$name.log" | sed "s/^/$name /"
}
prefill 16k-start "$START"
prefill 16k-old "$OLD"
prefill 16k-new "$NEW"
prefill 16k-new-nopdl "$NEW" TENSORFOLD_CUDA_PDL=0
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
quick 9b-device /tmp/s9m4 "$NEW"
quick 9b-host /tmp/s9m4 "$NEW" TENSORFOLD_HOST_DRAWS=1
rm -rf /tmp/s9m4
finish "$FINAL"
