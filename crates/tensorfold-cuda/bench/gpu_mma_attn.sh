#!/bin/bash
# gpu_mma_attn.sh FINAL BUDGET_S BIN OLD: call 70, tensor-core attention (attn_mma) against attn_chunk (OLD, the
# binary of 8332f36): every check and the tiny fixtures' token shas with BIN; 27B MLX4 quick benches with prefill at
# 2k and 16k, OLD and BIN in turn, twice; BIN's 16k prefill profile; both binaries' full 27B MLX4 sweep (rounds,
# streams, decode at 16k of context); the whole 27B bf16 shape's 16k prefill, OLD and BIN.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
tiny_shas "$BIN"
pre() {  # pre NAME BIN MODEL LENS [ENV...]
  local name=$1 bin=$2 model=$3 lens=$4; shift 4
  step "$name" 60 env "$@" "$bin" bench --device cuda --model "$model" --decode-tokens 16 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode|round of' "$OUT/$name.log" | grep -v "temperature\|presence" | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
for r in 1 2; do
  pre 27b-old-$r "$OLD" /dev/shm/s27m4 2048,16384 X=1
  pre 27b-new-$r "$BIN" /dev/shm/s27m4 2048,16384 X=1
done
pre 27b-new-profile "$BIN" /dev/shm/s27m4 16384 TENSORFOLD_CUDA_PROFILE=1
grep -E "profile of|attn_|project_gemm|dn_recur|^launches" "$OUT/27b-new-profile.log" | head -40
for b in old new; do
  bin=$BIN; [ $b = old ] && bin=$OLD
  step 27b-sweep-$b 60 "$bin" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 16384
  grep -E 'decode|streams|round of|prefill' "$OUT/27b-sweep-$b.log" | grep -v "temperature\|presence" | sed "s/^/27b-sweep-$b /"
done
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre 27b-bf16-old "$OLD" /dev/shm/s27b 16384 X=1
pre 27b-bf16-new "$BIN" /dev/shm/s27b 16384 X=1
rm -rf /dev/shm/s27b
finish "$FINAL"
