#!/bin/bash
# gpu_call183.sh FINAL BUDGET_S BIN: gpu_call182.sh's variants, gpu_call184.sh's SwiGLU tail and gpu_call181.sh's
# table in one call (starts are scarce): the checks of main, then of the zfill, wgahead and tail settings; then per
# shape one synthetic checkpoint, the variants on it (main, zfill, wgahead, tail, twice each for MLX4; main and
# wgahead twice for 27B bf16, whose weights run neither zfill's kernels nor the tail) and the issue's sweep with
# main, no peers. Three images precompiled into the carried cache: plain, TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_ZFILL
# and TENSORFOLD_CUDA_L2_AHEAD_ROUNDS=1 (nvrtc.rs adds -DTF_WG_AHEAD from it); the tail is the host's choice
# (TENSORFOLD_CUDA_SWIGLU_TAIL=1), on the plain image. The look-ahead off is left out: calls 179-180 timed it.
FINAL=${1:?out dir}; BUDGET=${2:-500}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
full_check "$BIN"
ZF="TENSORFOLD_CUDA_DEFINES=-DTF_STREAM_ZFILL"
WG="TENSORFOLD_CUDA_L2_AHEAD_ROUNDS=1"
TAIL="TENSORFOLD_CUDA_SWIGLU_TAIL=1"
image_checks zfill "$BIN" "$ZF"
image_checks wgahead "$BIN" "$WG"
image_checks tail "$BIN" "$TAIL"
# `shape NAME SHAPE FORMAT SYNTH_S LENS ROUNDS VARIANT...`: a synthetic checkpoint, the variants, the sweep, removed.
shape() {
  local d=/dev/shm/$1 name=$1 sh=$2 fmt=$3 need=$4 lens=$5 rounds=$6
  shift 6
  step "synth-$name" "$need" "$BIN" synth --shape "$sh" --format "$fmt" --threads 16 --out "$d"
  [ "$rounds" -gt 0 ] && variants "$name" "$d" "$rounds" "$@"
  sweep "sweep-$name" "$d" "$lens" "$BIN"
  rm -rf "$d"
}
shape 27b-mlx4 27b mlx4 60 2048,16384,32768 2 main=TF_MAIN=1 zfill=$ZF wgahead=$WG tail=$TAIL
shape 9b-mlx4 9b mlx4 40 2048,16384 2 main=TF_MAIN=1 zfill=$ZF wgahead=$WG tail=$TAIL
shape 9b-bf16 9b bf16 60 2048,16384 0
shape 27b-bf16 27b bf16 150 2048,16384,32768 2 main=TF_MAIN=1 wgahead=$WG
finish "$FINAL"
