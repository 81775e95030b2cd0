#!/bin/bash
# gpu_dn_ring.sh FINAL BUDGET_S BIN: call 94. The DeltaNet recurrence with each row's inputs copied into shared
# memory 5 rows ahead (dn_recur_ring_v*, the default) against its inputs loaded one row ahead into registers
# (TENSORFOLD_CUDA_DN_RING=0): backend-ops and tiny-mlx-4bit's suite each way, two fixtures' full suites and the tiny
# shas with the default; 27B MLX4 quick benches (decode, 1- and 16-row rounds, 2k prefill) in turn, a 16k prefill
# each way; the whole 27B bf16 shape's 16k prefill each way.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
step check-regs 40 env TENSORFOLD_CUDA_DN_RING=0 "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|^FAIL|cases," "$OUT/check-regs.log" | head | sed "s/^/check-regs /"
for f in tiny-mlx-4bit tiny-wrapper-bf16; do
  step full-$f 40 "$BIN" check --device cuda --model fixtures/$f
  grep -E "^oracle|cases,|^FAIL" "$OUT/full-$f.log" | head -4 | sed "s/^/full-$f /"
done
tiny_shas "$BIN"
pre() {  # pre NAME MODEL LENS ENV...
  local name=$1 model=$2 lens=$3; shift 3
  step "$name" 50 env "$@" "$BIN" bench --device cuda --model "$model" --decode-tokens 16 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode, 1 stream \||round of' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  quick q-regs-$r /dev/shm/s27m4 "$BIN" TENSORFOLD_CUDA_DN_RING=0
  quick q-ring-$r /dev/shm/s27m4 "$BIN"
done
pre m4-regs-16k /dev/shm/s27m4 16384 TENSORFOLD_CUDA_DN_RING=0
pre m4-ring-16k /dev/shm/s27m4 16384
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre bf16-regs /dev/shm/s27b 2048,16384 TENSORFOLD_CUDA_DN_RING=0
pre bf16-ring /dev/shm/s27b 2048,16384
rm -rf /dev/shm/s27b
finish "$FINAL"
