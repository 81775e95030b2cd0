#!/bin/bash
# gpu_pipe.sh FINAL BUDGET_S BIN: (written without a GPU; supersedes gpu_bf16_l1.sh, which never ran) the final
# defaults' checks, then the pipelined wgmma round kernels (TENSORFOLD_CUDA_WGMMA_PIPE=1: a block keeps one group's
# wgmmas running while it turns its copy ring and unpacks the next) against the default ones. Their bits first
# (backend-ops, whose shared-launch group compares them with the default build bit for bit; the 4-bit and bf16
# fixtures' full suites with every matrix's rounds on wgmma from 5 rows), then 27B bf16 and 27B MLX4 rounds, off and
# on in turn, twice each (4-bit also with the default build on blocks of 64 outputs, as the pipelined 4-bit one has);
# the bf16 kernel from 5 rows instead of 10; aggregate decode; compute-sanitizer last.
# Needs the default cubin and the -DWG_PIPE_BTILE_CG one in the kernel cache (every other variant is a switch).
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
PIPE=(TENSORFOLD_CUDA_WGMMA_PIPE=1)
FEW=(TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS=0 TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5)
step pipe-ops 60 env "${PIPE[@]}" TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5 "$BIN" check --device cuda --ops --quick \
  --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|cases,|^FAIL" "$OUT/pipe-ops.log" | head | sed "s/^/pipe-ops /"
grep -c "pipelined.*bit-equal" "$OUT/pipe-ops.log" | sed "s/^/pipe-ops pipelined checks equal: /"
step m1all-ops 60 env TENSORFOLD_CUDA_WGMMA_M1=all "$BIN" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
grep -E "^backend-ops|cases,|^FAIL" "$OUT/m1all-ops.log" | head | sed "s/^/m1all-ops /"
for f in tiny-mlx-4bit tiny-wrapper-bf16; do
  for v in off on; do
    e=(X=1); [ $v = on ] && e=("${PIPE[@]}")
    step full-few-$v-$f 40 env "${FEW[@]}" "${e[@]}" "$BIN" check --device cuda --model fixtures/$f
    grep -E "^oracle|cases,|^FAIL|^DIFF" "$OUT/full-few-$v-$f.log" | head -4 | sed "s/^/full-few-$v-$f /"
  done
done
rounds() {  # rounds NAME MODEL ROWS ENV...: one quick bench of rounds of ROWS under ENV
  local name=$1 model=$2 rows=$3; shift 3
  step "$name" 25 env "$@" "$BIN" bench --device cuda --model "$model" --quick --decode-tokens 4 --repeat 1 \
    --prefill-lens 64 --round-rows "$rows"
  grep -hE "round of" "$OUT/$name.log" | cut -c1-62 | sed "s/^/$name /"
}
sweeps() {  # sweeps NAME MODEL: the whole bench (decode, rounds, a 2k prefill, aggregate decode) pipelining off, on
  local v e
  for v in off on; do
    e=(X=1); [ $v = on ] && e=("${PIPE[@]}")
    step sweep-$1-$v 60 env "${e[@]}" "$BIN" bench --device cuda --model "$2" --decode-tokens 32 --repeat 1 \
      --prefill-lens 2048
    grep -E "^\|" "$OUT/sweep-$1-$v.log" | cut -c1-100 | sed "s/^/sweep-$1-$v /"
  done
}
profiles() {  # profiles NAME MODEL: the event profile of 16-row rounds, pipelining off and on
  local v e
  for v in off on; do
    e=(X=1); [ $v = on ] && e=("${PIPE[@]}")
    step prof16-$1-$v 30 env "${e[@]}" TENSORFOLD_CUDA_PROFILE=1 "$BIN" bench --device cuda --model "$2" \
      --quick --decode-tokens 4 --repeat 1 --prefill-lens 64 --round-rows 16
    grep -E "project_wgmma" "$OUT/prof16-$1-$v.log" | head -6 | sed "s/^/prof16-$1-$v /"
  done
}
# bf16 first: its 16-row round (1.27× a 1-row one, call 128) is the nearer to the issue's 1.2×.
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
for r in 1 2; do
  rounds bf-off-$r /dev/shm/s27b 1,10,12,16,32,64 X=1
  rounds bf-on-$r /dev/shm/s27b 1,10,12,16,32,64 "${PIPE[@]}"
done
profiles bf16 /dev/shm/s27b
for v in off on; do
  e=(X=1); [ $v = on ] && e=("${PIPE[@]}")
  rounds bf-few5-$v /dev/shm/s27b 1,5,6,8,9 TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5 "${e[@]}"
done
rounds bf-few10 /dev/shm/s27b 1,5,6,8,9 X=1
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out /dev/shm/s27m4
# 4-bit pipelined launches have blocks of 64 outputs (_m1) and copy x's B tiles through L1: M1=all gives the default
# build the same blocks, and -DWG_PIPE_BTILE_CG (its own cubin) the pipelined one the default's copies past L1, so
# the shares of the smaller blocks, of L1 and of the pipelining in any difference can be told apart.
for r in 1 2; do
  rounds m4-off-$r /dev/shm/s27m4 1,5,8,9,16 X=1
  rounds m4-m1all-$r /dev/shm/s27m4 1,5,8,9,16 TENSORFOLD_CUDA_WGMMA_M1=all
  rounds m4-on-$r /dev/shm/s27m4 1,5,8,9,16 "${PIPE[@]}"
  rounds m4-oncg-$r /dev/shm/s27m4 1,5,8,9,16 "${PIPE[@]}" TENSORFOLD_CUDA_DEFINES=-DWG_PIPE_BTILE_CG
done
profiles m4 /dev/shm/s27m4
sweeps m4 /dev/shm/s27m4
sweeps bf16 /dev/shm/s27b
rm -rf /dev/shm/s27m4 /dev/shm/s27b
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step memcheck-4bit-pipe 90 env "${FEW[@]}" "${PIPE[@]}" "$cs" --print-limit 10 "$BIN" check --device cuda \
  --model fixtures/tiny-mlx-4bit
grep -E "ERROR SUMMARY|cases," "$OUT/memcheck-4bit-pipe.log" | sed "s/^/memcheck-4bit-pipe /"
finish "$FINAL"
