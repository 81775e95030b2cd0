#!/bin/bash
# gpu_mma_fold.sh FINAL BUDGET_S BIN OLD: call 72, attn_mma with tile statistics folded in order (a row alone
# takes its tiles side by side, rows of a prompt in turn): every check and the tiny fixtures' shas with BIN; 27B
# MLX4 quick benches (decode, rounds of 1 and 16 rows, prefill 2k and 16k) of OLD (attn_chunk, 8332f36) and BIN,
# in turn, twice; BIN's sweep (rounds, streams, decode at 16k of context);
# Nsight Compute on BIN's first prompt-chunk launch; the whole 27B bf16 shape's 16k prefill, OLD and BIN.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}; OLD=${4:?old binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
tiny_shas "$BIN"
pre() {  # pre NAME BIN MODEL LENS
  step "$1" 60 "$2" bench --device cuda --model "$3" --decode-tokens 16 --repeat 1 --quick --prefill-lens "$4"
  grep -E 'prefill|decode, 1|round of' "$OUT/$1.log" | cut -c1-100 | sed "s/^/$1 /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pre q-old-1 "$OLD" /dev/shm/s27m4 2048,16384
pre q-new-1 "$BIN" /dev/shm/s27m4 2048,16384
pre q-old-2 "$OLD" /dev/shm/s27m4 2048,16384
pre q-new-2 "$BIN" /dev/shm/s27m4 2048,16384
step sweep-new 60 "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --prefill-lens 16384
grep -E 'decode|streams|round of|prefill' "$OUT/sweep-new.log" | grep -v "temperature\|presence" | cut -c1-110 | sed "s/^/sweep-new /"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
step ncu-pre 80 "$NCU" --kernel-name attn_mma --launch-skip 0 --launch-count 1 --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section SpeedOfLight --section LaunchStats \
  "$BIN" run --device cuda --model /dev/shm/s27m4 --prompt-ids "$(seq -s, 1 2048)" --max-tokens 2 --ignore-eos
grep -E "Duration|Stall|stalled|Issue|Eligible|Active Warps|Occupancy|Registers|Warp Cycles|Block Size|Grid Size|Throughput" "$OUT/ncu-pre.log" | head -50
rm -rf /dev/shm/s27m4
step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
pre bf16-old "$OLD" /dev/shm/s27b 16384
pre bf16-new "$BIN" /dev/shm/s27b 16384
rm -rf /dev/shm/s27b
finish "$FINAL"
