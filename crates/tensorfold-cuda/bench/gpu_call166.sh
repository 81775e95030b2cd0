#!/bin/bash
# gpu_call166.sh FINAL BUDGET_S BIN: bf16 rounds of up to 16 rows pipelined as the bf16 prompt GEMM is (a group's
# wgmmas running while the next is staged and issued) against TF_WG_BF16_SERIAL: every check, then quick benches
# of 27B and 9B bf16 in turn (rounds of 1 and 16 rows, decode, a 2k prefill).
FINAL=${1:?out dir}; BUDGET=${2:-330}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
S="TENSORFOLD_CUDA_DEFINES=-DTF_WG_BF16_SERIAL"
step serial-ops 60 env $S "$BIN" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
grep -hE "^backend-ops|cases,|^FAIL" "$OUT"/serial-ops.log | sed "s/^/serial /"
B=/dev/shm/s9bf
step synth-9bf 60 "$BIN" synth --shape 9b --format bf16 --threads 16 --out $B
for r in 1 2; do
  quick b9-pipe-$r $B "$BIN"
  quick b9-serial-$r $B "$BIN" $S
done
rm -rf $B
B=/dev/shm/s27bf
step synth-bf 90 "$BIN" synth --shape 27b --format bf16 --threads 16 --out $B
for r in 1 2; do
  quick bf-pipe-$r $B "$BIN"
  quick bf-serial-$r $B "$BIN" $S
done
rm -rf $B
finish "$FINAL"
