#!/bin/bash
# gpu_mtp141.sh FINAL BUDGET_S BIN: (call 141) the built-in model's drafting bench with the MTP head alone, drafts
# drawn on the device (the default) against TENSORFOLD_HOST_DRAWS=1 (the same draws and ranks computed on host rows),
# twice each, alternating: call 140's head-only run drafted 4 rows on the rewrite where call 136's drafted 189.
FINAL=${1:?out dir}; BUDGET=${2:-150}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
first_check "$BIN"
for r in 1 2; do
  for mode in device host; do
    env=X=1; [ $mode = host ] && env=TENSORFOLD_HOST_DRAWS=1
    step mtp-$mode-$r 30 env $env "$BIN" bench --drafts --device cuda --model models/tensorfold-coder-tiny \
      --decode-tokens 256 --repeat 5 --drafters mtp
    grep -E "^\| (rewrite|new|prose)|^engine|rror" "$OUT/mtp-$mode-$r.log" | cut -c1-110 | sed "s/^/mtp-$mode-$r /"
  done
done
finish "$FINAL"
