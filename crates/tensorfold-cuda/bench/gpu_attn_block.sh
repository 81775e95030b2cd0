#!/bin/bash
# gpu_attn_block.sh FINAL BUDGET_S BIN: calls 73 and 74, attention for rows of one chain with shared key tiles
# (attn_block, attention_block.cu): every check and the tiny fixtures' shas with BIN (attn_block on); 27B MLX4
# quick benches (decode, rounds of 1 and 16 rows, prefill 2k and 16k) with TENSORFOLD_CUDA_ATTN_BLOCK = 0
# (attn_chunk), 3 (48 columns a block) and 2 (32 columns), in turn; a profile of the 16k prefill with each of 0
# and 3 (call 73) or 3 alone (call 74); Nsight Compute on one attn_block launch of a 4k prompt; call 74: the whole
# 27B bf16 shape's 16k prefill with 0 and 3.
FINAL=${1:?out dir}; BUDGET=${2:-560}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$BIN"
tiny_shas "$BIN"
pre() {  # pre NAME MODEL LENS ENV...
  local name=$1 model=$2 lens=$3; shift 3
  step "$name" 60 env "$@" "$BIN" bench --device cuda --model "$model" --decode-tokens 16 --repeat 1 --quick --prefill-lens "$lens"
  grep -E 'prefill|decode, 1|round of' "$OUT/$name.log" | cut -c1-100 | sed "s/^/$name /"
}
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --out /dev/shm/s27m4
pre q-chunk-1 /dev/shm/s27m4 2048,16384 TENSORFOLD_CUDA_ATTN_BLOCK=0
pre q-block3-1 /dev/shm/s27m4 2048,16384 TENSORFOLD_CUDA_ATTN_BLOCK=3
pre q-block2-1 /dev/shm/s27m4 2048,16384 TENSORFOLD_CUDA_ATTN_BLOCK=2
pre q-chunk-2 /dev/shm/s27m4 2048,16384 TENSORFOLD_CUDA_ATTN_BLOCK=0
pre q-block3-2 /dev/shm/s27m4 2048,16384 TENSORFOLD_CUDA_ATTN_BLOCK=3
pre q-block2-2 /dev/shm/s27m4 2048,16384 TENSORFOLD_CUDA_ATTN_BLOCK=2
for v in ${PROF:-0 3}; do
  step prof-$v 60 env TENSORFOLD_CUDA_PROFILE=1 TENSORFOLD_CUDA_ATTN_BLOCK=$v "$BIN" bench --device cuda \
    --model /dev/shm/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 16384
  grep -E 'prefill 16384' "$OUT/prof-$v.log" | sed "s/^/prof-$v /"
  sed -n '/profile of the 16384/,/^launches/p' "$OUT/prof-$v.log" | grep -E 'attn|^launches|gemm_a4_g2_bf16 17408' | sed "s/^/prof-$v /"
done
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
step ncu-block 80 "$NCU" --kernel-name regex:attn_block --launch-skip 40 --launch-count 1 --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section SpeedOfLight --section LaunchStats --section MemoryWorkloadAnalysis \
  "$BIN" run --device cuda --model /dev/shm/s27m4 --prompt-ids "$(seq -s, 1 4096)" --max-tokens 2 --ignore-eos
grep -E "Duration|Stall|stalled|Issue|Eligible|Active Warps|Occupancy|Registers|Warp Cycles|Block Size|Grid Size|Throughput|Shared" "$OUT/ncu-block.log" | head -50
rm -rf /dev/shm/s27m4
if [ -n "$BF16" ]; then
  step synth-27b-bf16 150 "$BIN" synth --shape 27b --format bf16 --threads 16 --out /dev/shm/s27b
  pre bf16-chunk /dev/shm/s27b 16384 TENSORFOLD_CUDA_ATTN_BLOCK=0
  pre bf16-block3 /dev/shm/s27b 16384 TENSORFOLD_CUDA_ATTN_BLOCK=3
  rm -rf /dev/shm/s27b
fi
finish "$FINAL"
