#!/bin/bash
# gpu_mtp140.sh FINAL BUDGET_S BIN: (call 140) the MTP head's drafts drawn on the device (next_drafts: the keyed
# draw there and the probability from row_top's ranks and total) against the host's draw and softmax over the
# vocabulary, which call 139 timed at 1.75 ms a step greedy and 15.9 ms at temperature 0.8 on the 27B shape:
# every check; the 27B MLX4 step both ways (bench's MTP lines) on a checkpoint with a head; the built-in model's
# drafting bench with the head alone and with both drafters (call 136's command, its numbers the host path's).
FINAL=${1:?out dir}; BUDGET=${2:-240}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
all_checks "$BIN"
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --mtp --threads 16 --out $M
step m27-mtp 60 "$BIN" bench --device cuda --model $M --decode-tokens 16 --repeat 1 --quick --prefill-lens 64
grep -E "^\| (MTP|decode, 1 stream \||round of 1 )" "$OUT/m27-mtp.log" | cut -c1-190 | sed "s/^/m27-mtp /"
rm -rf $M
for d in mtp both; do
  step drafts-$d 30 "$BIN" bench --drafts --device cuda --model models/tensorfold-coder-tiny --decode-tokens 256 \
    --repeat 5 --drafters $d
  grep -E "^\| (rewrite|new|prose)|^engine|rror" "$OUT/drafts-$d.log" | cut -c1-160 | sed "s/^/drafts-$d /"
done
finish "$FINAL"
