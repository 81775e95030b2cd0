#!/bin/bash
# gpu_final.sh FINAL BUDGET_S OLD NEW: on the GPU machine, one call: backend-ops and every equality suite with NEW;
# 27B MLX 4-bit: OLD and NEW alternated (quick decode, 16-row rounds and a 2k prefill, twice), a profile of NEW,
# the full sweep of NEW with prompts of 2k, 16k and 32k tokens; then NEW's full sweep on the 9B shapes
# (MLX 4-bit and bf16, beside the transformers + torch peer on the same bf16 checkpoint) and the prefill of a
# 16-layer cut of the 27B bf16 shape (the 64-layer one does not fit the machine's disk next to the others).
# OLD may be a wrapper running NEW under other switches (e.g. TENSORFOLD_CUDA_GEMM=0). $ALT (optional): a third
# binary or wrapper in the quick alternation.
FINAL=${1:?out dir}; BUDGET=${2:-540}; OLD=${3:?old binary}; NEW=${4:?new binary}
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
all_checks "$NEW"
sweep() {  # sweep NAME BIN MODEL LENS
  step "$1" 200 "$2" bench --device cuda --model "$3" --decode-tokens 16 --repeat 1 --prefill-lens "$4"
  grep -E 'prefill|decode|streams|round of' "$OUT/$1.log" | sed "s/^/$1 /"
}
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  for b in old new ${ALT:+alt}; do
    bin=$OLD; [ $b = new ] && bin=$NEW; [ $b = alt ] && bin=$ALT
    step quick-$b-$i 40 "$bin" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 2 --quick
    echo "$b $i: $(grep -m1 'decode, 1 stream' "$OUT/quick-$b-$i.log") $(grep 'round of 16' "$OUT/quick-$b-$i.log")"
  done
done
step profile-new 40 env TENSORFOLD_CUDA_PROFILE=1 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick
sweep 27b-mlx4-new "$NEW" /tmp/s27m4 2048,16384,32768
# SWEEP_OLD=1: OLD's full sweep too, with 2k and 16k prompts.
if [ -n "$SWEEP_OLD" ]; then sweep 27b-mlx4-old "$OLD" /tmp/s27m4 2048,16384; fi
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
sweep 9b-mlx4-new "$NEW" /tmp/s9m4 2048,16384
rm -rf /tmp/s9m4
step synth-9b-bf16 60 "$NEW" synth --shape 9b --format bf16 --out /tmp/s9b
sweep 9b-bf16-new "$NEW" /tmp/s9b 2048,16384
# NO_PEER=1 leaves out the transformers + torch peer (its numbers do not move with ours; saves ~60 s).
if [ -z "$NO_PEER" ]; then
  step peer-9b-bf16 90 python3 "$(dirname "$0")/peer_transformers.py" /tmp/s9b 32
  grep -E "peer|transformers" "$OUT/peer-9b-bf16.log" | tail -4
fi
rm -rf /tmp/s9b
step synth-27b-bf16-16l 60 "$NEW" synth --shape 27b --format bf16 --layers 16 --out /tmp/s27b16
sweep 27b-bf16-16layers-new "$NEW" /tmp/s27b16 2048,16384
rm -rf /tmp/s27b16
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
