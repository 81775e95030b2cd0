#!/bin/bash
# gpu_dn_vm.sh FINAL BUDGET_S BIN: call 95. The DeltaNet recurrence at one value row a warp (TENSORFOLD_CUDA_DN_VM=1:
# 16 blocks a 128-row head) against two (the default), each with its inputs in registers (TENSORFOLD_CUDA_DN_RING=0)
# and staged ahead in shared memory: backend-ops with VM 1; 27B MLX4 quick benches and 16k prefills in turn; Nsight
# Compute's warp states on the 64-row prefill launch each way.
FINAL=${1:?out dir}; BUDGET=${2:-300}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
step check-vm1 40 env TENSORFOLD_CUDA_DN_VM=1 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases," "$OUT/check-vm1.log" | head | sed "s/^/check-vm1 /"
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pre() {  # pre NAME LENS ENV...
  local name=$1 lens=$2; shift 2
  step "$name" 40 env "$@" "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode, 1 stream \||round of' "$OUT/$name.log" | cut -c1-100 | sed "s/^/$name /"
}
for r in 1 2; do
  pre vm2-regs-$r 16384 TENSORFOLD_CUDA_DN_RING=0
  pre vm1-regs-$r 16384 TENSORFOLD_CUDA_DN_RING=0 TENSORFOLD_CUDA_DN_VM=1
  pre vm1-ring-$r 16384 TENSORFOLD_CUDA_DN_VM=1
done
ncu_launches ncu-vm2 regex:dn_recur 0 1 "$BIN" /dev/shm/s27m4 SpeedOfLight Occupancy LaunchStats SchedulerStats WarpStateStats
TENSORFOLD_CUDA_DN_VM=1 ncu_launches ncu-vm1 regex:dn_recur 0 1 "$BIN" /dev/shm/s27m4 SpeedOfLight Occupancy LaunchStats SchedulerStats WarpStateStats
rm -rf /dev/shm/s27m4
finish "$FINAL"
