#!/usr/bin/env bash
# CI without a GPU: the CUDA backend's host side (recorded rounds and CUDA graphs, staging, paging, draws) on the
# CPU emulator (crates/tensorfold-cuda/emu), which runs the same kernels compiled for the CPU. Two tiny fixtures
# decoded with graphs on and off, drafted and not, must give one token sha each.
# Usage: tools/ci_cuda_emulator.sh NVRTC_LIB_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
nvrtc_dir=${1:?usage: ci_cuda_emulator.sh NVRTC_LIB_DIR}
emu="$PWD/target/cuda-emu"
bash crates/tensorfold-cuda/emu/build.sh "$emu"
cargo build -p tensorfold --features cuda
bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/tensorfold"
export LD_LIBRARY_PATH="$emu:$nvrtc_dir" TENSORFOLD_CACHE_DIR="$PWD/target/cuda-emu-cache"
status=0
# tiny-mlx-4bit decodes 300 tokens, so its KV page tables grow past their first 16 pages inside recorded rounds;
# tiny-wrapper-bf16 decodes 48, drafted by its MTP head and not (drafted rounds are trees and windows of rows).
for case in "tiny-mlx-4bit 300 drafts" "tiny-wrapper-bf16 48 drafts,--no-drafts"; do
  read -r model tokens modes <<< "$case"
  shas=""
  for graphs in 1 0; do
    for mode in ${modes//,/ }; do
      flag=""
      [ "$mode" = drafts ] || flag=$mode
      line=$(TENSORFOLD_CUDA_GRAPHS=$graphs "$bin" run --device cuda --model "fixtures/$model" \
        --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens "$tokens" --ignore-eos --json $flag | tail -1)
      sha=$(printf '%s' "$line" | grep -o '"token_sha":"[0-9a-f]*"' || true)
      echo "$model graphs=$graphs $mode: ${sha:-no token_sha in: $line}"
      [ -n "$sha" ] || status=1
      shas="$shas$sha"$'\n'
    done
  done
  if [ "$(printf '%s' "$shas" | sort -u | wc -l)" != 1 ]; then
    echo "FAIL: $model gives different tokens with graphs on and off, drafted and not"
    status=1
  fi
done
exit $status
