#!/bin/bash
# gpu_smem_src.sh FINAL BUDGET_S BIN: call 84, which instructions of the weight stream cost the shared-memory
# wavefronts Nsight Compute called excessive in call 83 (41% of the 1-row gate/up launch's). Source counters of one
# 1-row `_w8` gate/up launch (the 24th of its kernel: grid 2,176) and one 16-row gate/up launch (the 3rd nt2_s4_m2
# one), saved as reports and printed per SASS instruction as CSV.
FINAL=${1:?out dir}; BUDGET=${2:-400}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
src() {  # NAME KERNEL SKIP
  step "$1" 60 "$ncu" -f -o "$OUT/$1" --kernel-name "$2" --launch-skip "$3" --launch-count 1 --section SourceCounters \
    --section MemoryWorkloadAnalysis_Tables --section SpeedOfLight --import-source no \
    "$BIN" bench --device cuda --model /dev/shm/s27m4 --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  "$ncu" --import "$OUT/$1.ncu-rep" --page source --csv --print-source sass > "$FINAL/$1.sass.csv" 2> "$OUT/$1-csv.log"
  "$ncu" --import "$OUT/$1.ncu-rep" --page details --print-details all > "$OUT/$1-details.log" 2>&1
  head -3 "$FINAL/$1.sass.csv" | cut -c1-600
  wc -l "$FINAL/$1.sass.csv"
}
src src-1 project_stream_a4_g2_bf16_nt1_s4_m1_w8 23
src src-16 project_stream_a4_g2_bf16_nt2_s4_m2 2
rm -rf /dev/shm/s27m4
finish "$FINAL"
