#!/bin/bash
# gpu_attn_rows2.sh FINAL BUDGET_S BIN OLD: call 66, attention tiles of committed keys with their stride known
# (tile_scores / tile_values), in attn_rows and attn_chunk alike. BIN = this commit, OLD = call 65's binary run with
# TENSORFOLD_CUDA_ATTN_ROWS=0 (the kernels of a268e43). Every check and the fixtures' suites through attn_rows
# (receipts compared); 27B MLX4 prefill at 2k, 16k and 32k, OLD and BIN in turn; the full 27B MLX4 sweep with a
# 16k prompt (decode at 16k of context) for both; the whole 27B bf16 shape's 16k prefill for both.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
for f in tiny-mlx-4bit tiny-wrapper-bf16; do
  step rows-all-$f 30 env TENSORFOLD_CUDA_ATTN_ROWS=all "$BIN" check --device cuda --model fixtures/$f
  grep -v "^cuda:\|checks\|s)$" "$OUT/full-$f.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-default-$f.txt"
  grep -v "^cuda:\|checks\|s)$" "$OUT/rows-all-$f.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-all-$f.txt"
  echo "$f receipt shas default: $(wc -l < "$OUT/shas-default-$f.txt"), every round by attn_rows: $(wc -l < "$OUT/shas-all-$f.txt"), differing: $(diff "$OUT/shas-default-$f.txt" "$OUT/shas-all-$f.txt" | grep -c '^<')"
done
pre() {  # pre NAME MODEL BIN ROWS LENS [bench flags...]
  local name=$1 model=$2 bin=$3 rows=$4 lens=$5; shift 5
  step "$name" 60 env TENSORFOLD_CUDA_ATTN_ROWS=$rows "$bin" bench --device cuda --model "$model" --decode-tokens 16 --repeat 1 --prefill-lens "$lens" "$@"
  grep -E 'prefill|decode|round of|streams' "$OUT/$name.log" | grep -v "temperature\|presence" | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pre 27b-old /dev/shm/s27m4 "$OLD" 0 2048,16384,32768 --quick
pre 27b-new /dev/shm/s27m4 "$BIN" 1 2048,16384,32768 --quick
pre 27b-new-chunk /dev/shm/s27m4 "$BIN" 0 16384 --quick
pre 27b-old-full /dev/shm/s27m4 "$OLD" 0 16384
pre 27b-new-full /dev/shm/s27m4 "$BIN" 1 16384
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre 27b-bf16-old /dev/shm/s27b "$OLD" 0 16384 --quick
pre 27b-bf16-new /dev/shm/s27b "$BIN" 1 16384 --quick
rm -rf /dev/shm/s27b
finish "$FINAL"
