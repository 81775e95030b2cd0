#!/bin/bash
# gpu_dn_prepare.sh FINAL BUDGET_S BIN: call 96. The DeltaNet recurrence with each row's inputs staged in shared
# memory ahead and its normalised q, k and gates made once a block (dn_recur_ring_v*, the default) against every
# warp loading and normalising them itself (TENSORFOLD_CUDA_DN_RING=0): backend-ops and tiny-mlx-4bit's suite each
# way, two fixtures' full suites and the tiny shas; 27B MLX4 quick benches with a 16k prefill in turn; Nsight
# Compute on the 64-row prefill launch each way.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step check-regs 40 env TENSORFOLD_CUDA_DN_RING=0 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases," "$OUT/check-regs.log" | head | sed "s/^/check-regs /"
for f in tiny-mlx-4bit tiny-wrapper-bf16 tiny-mlx-mixed; do
  step full-$f 40 "$BIN" check --device cuda --model fixtures/$f
  grep -E "^oracle|cases,|^FAIL" "$OUT/full-$f.log" | head -4 | sed "s/^/full-$f /"
done
tiny_shas "$BIN"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pre() {  # pre NAME LENS ENV...
  local name=$1 lens=$2; shift 2
  step "$name" 40 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode, 1 stream \||round of' "$OUT/$name.log" | cut -c1-100 | sed "s/^/$name /"
}
for r in 1 2; do
  pre regs-$r 2048,16384 TENSORFOLD_CUDA_DN_RING=0
  pre ring-$r 2048,16384
done
ncu_launches ncu-ring regex:dn_recur 0 1 "$BIN" /dev/shm/s27m4 SpeedOfLight Occupancy LaunchStats SchedulerStats WarpStateStats
rm -rf /dev/shm/s27m4
finish "$FINAL"
