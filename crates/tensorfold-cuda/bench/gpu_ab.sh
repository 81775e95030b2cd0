#!/bin/bash
# gpu_ab.sh FINAL BUDGET_S BIN VARIANT...: on the GPU machine, one call: backend-ops and every equality suite with
# BIN, then quick runs (decode, 16-row rounds, 2k prefill) of every VARIANT (a binary, or a wrapper running one under
# switches; named by its file name) in turn, twice, on the 27B MLX 4-bit shape, and once each on the 9B MLX 4-bit one.
FINAL=${1:?out dir}; BUDGET=${2:-480}; BIN=${3:?binary}; shift 3
OUT=/tmp/tflogs
mkdir -p "$OUT" "$FINAL"
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
T0=$(date +%s)
. "$(dirname "$0")/steps.sh"
all_checks "$BIN"
quick() {  # quick NAME MODEL BIN
  step "$1" 40 "$3" bench --device cuda --model "$2" --decode-tokens 16 --repeat 2 --quick --prefill-lens 2048
  grep -E 'prefill|decode, 1|round of' "$OUT/$1.log" | sed "s/^/$1 /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do for v in "$@"; do quick "27b-$(basename $v)-$i" /tmp/s27m4 "$v"; done; done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --out /tmp/s9m4
for v in "$@"; do quick "9b-mlx4-$(basename $v)" /tmp/s9m4 "$v"; done
rm -rf /tmp/s9m4
echo "total $(( $(date +%s) - T0 ))s"
for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$FINAL/all.log"
