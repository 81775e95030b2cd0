#!/bin/bash
# gpu_compare.sh FINAL BUDGET_S LABEL=BIN... : on the GPU machine, one call: backend-ops and every equality suite
# with the last binary, then all binaries alternated on the 27B MLX 4-bit shape (quick decode and 16-row rounds,
# twice), the full sweep with prompts of $PREFILL_LENS tokens (default 2048,16384: prefill, then decode at that
# context) for each, and profiles of 1-row and 16-row rounds and a 2048-row prompt chunk with the last binary.
# $PROFILE and $LONG (labels, space-separated) pick other binaries for the profiles and the full sweeps.
FINAL=${1:?out dir}; BUDGET=${2:-420}; shift 2
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
labels=(); bins=()
for a in "$@"; do labels+=("${a%%=*}"); bins+=("${a#*=}"); done
NEW=${bins[-1]}
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  for k in "${!bins[@]}"; do
    b=${labels[$k]}
    step quick-$b-$i 25 "${bins[$k]}" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 2 --quick
    echo "$b $i: $(grep -m1 'decode, 1 stream' "$OUT/quick-$b-$i.log") $(grep 'round of 16' "$OUT/quick-$b-$i.log")"
  done
done
step quick-nopair 25 env TENSORFOLD_CUDA_PAIR=0 "$NEW" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 2 --quick
echo "nopair: $(grep -m1 'decode, 1 stream' "$OUT/quick-nopair.log") $(grep 'round of 16' "$OUT/quick-nopair.log")"
bin_of() { for k in "${!labels[@]}"; do [ "${labels[$k]}" = "$1" ] && echo "${bins[$k]}"; done; }
for b in ${PROFILE:-${labels[-1]}}; do
  step profile-$b 40 env TENSORFOLD_CUDA_PROFILE=1 "$(bin_of $b)" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick
done
for k in $(seq $(( ${#bins[@]} - 1 )) -1 0); do
  b=${labels[$k]}
  case " ${LONG:-${labels[*]}} " in *" $b "*) ;; *) continue ;; esac
  step long-$b 100 "${bins[$k]}" bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens "${PREFILL_LENS:-2048,16384}"
  grep -E 'prefill|decode|streams|round of' "$OUT/long-$b.log" | sed "s/^/$b /"
done
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
