#!/bin/bash
# gpu_attn_rows.sh FINAL BUDGET_S BIN: call 65, attention rows sharing their keys (attn_rows): every check; the
# fixtures' full suites with every round through attn_rows (TENSORFOLD_CUDA_ATTN_ROWS=all), receipts compared with
# the default's; 27B MLX4 prefill at 2k, 16k and 32k with attn_rows on and off (=0), twice in turn, and a profile
# of the 16k prefill; the whole 27B bf16 shape's 16k prefill on and off.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
for f in tiny-mlx-4bit tiny-wrapper-bf16; do
  step rows-all-$f 30 env TENSORFOLD_CUDA_ATTN_ROWS=all "$BIN" check --device cuda --model fixtures/$f
  grep -v "^cuda:\|checks\|s)$" "$OUT/full-$f.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-default-$f.txt"
  grep -v "^cuda:\|checks\|s)$" "$OUT/rows-all-$f.log" | grep -o "[0-9a-f]\{12\}" > "$OUT/shas-all-$f.txt"
  echo "$f receipt shas default: $(wc -l < "$OUT/shas-default-$f.txt"), every round by attn_rows: $(wc -l < "$OUT/shas-all-$f.txt"), differing: $(diff "$OUT/shas-default-$f.txt" "$OUT/shas-all-$f.txt" | grep -c '^<')"
  grep -hE "^oracle|cases," "$OUT/rows-all-$f.log"
done
pre() {  # pre NAME MODEL ROWS LENS [ENV...]
  local name=$1 model=$2 rows=$3 lens=$4; shift 4
  step "$name" 60 env TENSORFOLD_CUDA_ATTN_ROWS=$rows "$@" "$BIN" bench --device cuda --model "$model" --decode-tokens 4 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode, 1|round of' "$OUT/$name.log" | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pre 27b-rows-on /dev/shm/s27m4 1 2048,16384,32768
pre 27b-rows-off /dev/shm/s27m4 0 2048,16384,32768
pre 27b-rows-on2 /dev/shm/s27m4 1 2048,16384
pre 27b-rows-off2 /dev/shm/s27m4 0 2048,16384
pre 27b-prof-on /dev/shm/s27m4 1 16384 TENSORFOLD_CUDA_PROFILE=1
sed -n '/profile of the 16384/,/^launches/p' "$OUT/27b-prof-on.log" | head -14
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre 27b-bf16-rows-on /dev/shm/s27b 1 16384
pre 27b-bf16-rows-off /dev/shm/s27b 0 16384
rm -rf /dev/shm/s27b
finish "$FINAL"
