#!/bin/bash
# gpu_untimed.sh FINAL BUDGET_S BIN: what a session without device time built, timed. (1) DeltaNet chains on the
# batched kernel (deltanet_batch.cu, TENSORFOLD_CUDA_DN_BATCH=1) against the one-row ring (the default): every check,
# and the equality suites with the batched kernel; then 27B MLX4 and 27B bf16 rounds and prefills, the two
# alternating in one run, and the event profile of 16-row rounds with each. (2) x's B tiles through L1 in the wgmma
# round kernels (TENSORFOLD_CUDA_DEFINES=-DWG_BTILE_CA; precompile its cubin into the carried cache too, or the device
# compiles it, about 40 s): backend-ops with it, and 16- and 32-row rounds each way. (3) Rounds on blocks of two
# warpgroups sharing x's B tile (TENSORFOLD_CUDA_WGMMA_WG2=1: rounds of 9 to 64 rows; backend-ops checks them
# whatever the environment says): the shared-launch checks unsplit, tiny-mlx-4bit's and tiny-wrapper-bf16's suites
# with every matrix on them, 27B MLX4 rounds of 9, 16, 32 and 64 rows and 27B bf16 ones of 12, 16 and 32 each way,
# and the event profile of a 16-row 27B MLX4 round. Ran as call 128 (commit 8f6fea4); the two-warpgroup kernels and
# -DWG_BTILE_CA are gone since (BENCHMARKS.md §7, calls 128-129).
FINAL=${1:?out dir}; BUDGET=${2:-540}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
for f in tiny-mlx-4bit tiny-wrapper-bf16; do
  step full-batch-$f 40 env TENSORFOLD_CUDA_DN_BATCH=1 "$BIN" check --device cuda --model fixtures/$f
  grep -E "^oracle|cases,|^FAIL|^DIFF" "$OUT/full-batch-$f.log" | sed "s/^/full-batch-$f /"
done
pair() {  # pair NAME MODEL ARGS...: the ring (DN_BATCH=0), then the batched kernel (DN_BATCH=1)
  local name=$1 model=$2; shift 2
  for v in 0 1; do
    step "$name-$v" 45 env TENSORFOLD_CUDA_DN_BATCH=$v "$BIN" bench --device cuda --model "$model" "$@"
    grep -hE "round of|prefill|decode, 1 stream \|" "$OUT/$name-$v.log" | cut -c1-110 | sed "s/^/$name-batch$v /"
  done
}
step synth-27b-mlx4 40 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pair m4-1 /dev/shm/s27m4 --quick --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384 --round-rows 1,4,16,32
pair m4-2 /dev/shm/s27m4 --quick --decode-tokens 16 --repeat 1 --prefill-lens 2048 --round-rows 1,4,16,32
for v in 0 1; do
  step prof16-$v 40 env TENSORFOLD_CUDA_DN_BATCH=$v TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda \
    --model /dev/shm/s27m4 --quick --decode-tokens 4 --repeat 1 --prefill-lens 64 --round-rows 16
  grep -hE "dn_recur|wgmma|round of 16" "$OUT/prof16-$v.log" | cut -c1-110 | sed "s/^/prof16-batch$v /"
done
# variants NAME MODEL ROWS KINDS: rounds of ROWS with x's B tiles past L1 (cg, the default), through it (ca), and on
# blocks of two warpgroups (wg2)
variants() {
  local name=$1 model=$2 rows=$3 kinds=$4
  for v in $kinds; do
    local d="" w=0; [ $v = ca ] && d=-DWG_BTILE_CA; [ $v = wg2 ] && w=1
    step "$name-$v" 30 env TENSORFOLD_CUDA_DEFINES="$d" TENSORFOLD_CUDA_WGMMA_WG2=$w "$BIN" bench --device cuda \
      --model "$model" --quick --decode-tokens 4 --repeat 1 --prefill-lens 64 --round-rows "$rows"
    grep -hE "round of" "$OUT/$name-$v.log" | cut -c1-70 | sed "s/^/$name-$v /"
  done
}
step check-ops-ca 60 env TENSORFOLD_CUDA_DEFINES=-DWG_BTILE_CA "$BIN" check --device cuda --ops --quick \
  --model fixtures/tiny-mlx-4bit
grep -hE "^backend-ops|cases,|^FAIL" "$OUT/check-ops-ca.log" | sed "s/^/check-ops-ca /"
step check-wg2-split0 30 env TENSORFOLD_CUDA_WGMMA_SPLIT=0 TENSORFOLD_CUDA_OPS=pairs "$BIN" check --device cuda \
  --ops-only
for f in tiny-mlx-4bit tiny-wrapper-bf16; do
  step full-wg2-$f 40 env TENSORFOLD_CUDA_WGMMA_WG2=1 TENSORFOLD_CUDA_WGMMA_M1=0 TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=0 \
    TENSORFOLD_CUDA_WGMMA_MIN_ROWS=9 "$BIN" check --device cuda --model fixtures/$f
done
grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF" "$OUT/check-wg2-split0.log" "$OUT"/full-wg2-*.log | sed "s/^/wg2 /"
for r in 1 2; do variants m4-tiles-$r /dev/shm/s27m4 1,9,16,32,64 "cg ca wg2"; done
step prof16-wg2 40 env TENSORFOLD_CUDA_WGMMA_WG2=1 TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda \
  --model /dev/shm/s27m4 --quick --decode-tokens 4 --repeat 1 --prefill-lens 64 --round-rows 16
grep -hE "wgmma|round of 16" "$OUT/prof16-wg2.log" | cut -c1-110 | sed "s/^/prof16-wg2 /"
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pair bf16 /dev/shm/s27b --quick --decode-tokens 16 --repeat 1 --prefill-lens 2048,16384 --round-rows 1,16
variants bf16-tiles /dev/shm/s27b 1,12,16,32 "cg ca wg2"
rm -rf /dev/shm/s27b
finish "$FINAL"
