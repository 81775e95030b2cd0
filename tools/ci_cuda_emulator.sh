#!/usr/bin/env bash
# CI without a GPU: the CUDA backend's host side (recorded rounds and CUDA graphs, staging, paging, draws) on the
# CPU emulator (crates/tensorfold-cuda/emu), which runs the same kernels compiled for the CPU. Two tiny fixtures
# decoded with graphs on and off, drafted and not, must give one token sha each (the second again with bf16 KV
# pages, its MTP head's included); the backend-ops test's attention (f32 and bf16 pages), prompt-kernel,
# shared-launch and DeltaNet checks must pass.
# Every launch is also checked against the GPU's register file and shared memory, with each kernel's registers read
# from the cubin NVRTC built (crates/tensorfold-cuda/emu/limits.cpp): a launch the GPU would refuse fails here.
# Usage: tools/ci_cuda_emulator.sh NVRTC_LIB_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
nvrtc_dir=${1:?usage: ci_cuda_emulator.sh NVRTC_LIB_DIR}
emu="$PWD/target/cuda-emu"
bash crates/tensorfold-cuda/emu/build.sh "$emu"
cargo build -p tensorfold --features cuda
cargo test -q -p tensorfold --features cuda --bin tensorfold cuda_serve
bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/tensorfold"
export LD_LIBRARY_PATH="$emu:$nvrtc_dir" TENSORFOLD_CACHE_DIR="$PWD/target/cuda-emu-cache"
status=0
# The attention checks of the backend-ops test (crates/tensorfold-cuda/src/selftest_mix_attention.rs check_attention):
# rounds against the CPU twin at head_dim 32 and 256, and, bit for bit, long contexts whose committed tiles take
# the stride-known paths (attention.cu tile_scores, tile_values) against the same rows on the generic path, and
# grouped heads against one head a block. The decodes below never reach head_dim 256's value path. Then the prompt
# kernels' checks (selftest.rs check_prompt_kernel): the mma.sync and wgmma prompt kernels against the decode kernels,
# bit for bit, and that the emulator (which reports sm_90a) takes the wgmma one for bf16 and 4-bit g64 matrices.
# Then the shared-launch checks (selftest_pairs.rs): matrices sharing an input in one launch against one projection
# each, which at 6 to 64 rows puts small matrices on the wgmma round kernels (4-bit and bf16, the 64-column build
# with its parts of 32 rows) against the decode kernels. Then the DeltaNet checks (selftest_mix_linear.rs): rounds
# against the CPU twin, and chains on the staged kernels (one row ahead, a batch at a time, pipelined) against the
# decode recurrence, bit for bit. Then the row-wise checks (selftest.rs check_rowwise, selftest_norms.rs): norms and
# SwiGLU against the CPU twin, and norms whose row spans a cluster of 4 or 8 blocks (the emulator runs a cluster's
# blocks together) against one block a row, bit for bit. They take about 12 minutes on one core, so they run
# beside the decodes (the emulator keeps each process on one core).
TENSORFOLD_CUDA_OPS=attention,prompt,pairs,deltanet,rowwise "$bin" check --device cuda --ops-only > "$emu/attention-ops.log" 2>&1 &
attention=$!
# The shared-launch checks again with bf16 rounds on the wgmma kernels from 5 rows (TENSORFOLD_CUDA_WGMMA_MIN_ROWS):
# their 16-column builds against the decode kernels at 6 and 9 rows, split and unsplit.
TENSORFOLD_CUDA_WGMMA_MIN_ROWS=5 TENSORFOLD_CUDA_OPS=pairs "$bin" check --device cuda --ops-only > "$emu/pairs-few-ops.log" 2>&1 &
few=$!
# tiny-mlx-4bit decodes 300 tokens, so its KV page tables grow past their first 16 pages inside recorded rounds;
# tiny-wrapper-bf16 decodes 48, drafted by its MTP head and not (drafted rounds are trees and windows of rows).
for case in "tiny-mlx-4bit 300 drafts" "tiny-wrapper-bf16 48 drafts,--no-drafts" \
  "tiny-wrapper-bf16 48 drafts,--no-drafts --kv-cache-dtype bf16"; do
  read -r model tokens modes extra <<< "$case"
  shas=""
  for graphs in 1 0; do
    for mode in ${modes//,/ }; do
      flag=""
      [ "$mode" = drafts ] || flag=$mode
      line=$(TENSORFOLD_CUDA_GRAPHS=$graphs "$bin" run --device cuda --model "fixtures/$model" \
        --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens "$tokens" --ignore-eos --json $flag $extra | tail -1)
      sha=$(printf '%s' "$line" | grep -o '"token_sha":"[0-9a-f]*"' || true)
      echo "$model $extra graphs=$graphs $mode: ${sha:-no token_sha in: $line}"
      [ -n "$sha" ] || status=1
      shas="$shas$sha"$'\n'
    done
  done
  if [ "$(printf '%s' "$shas" | sort -u | wc -l)" != 1 ]; then
    echo "FAIL: $model $extra gives different tokens with graphs on and off, drafted and not"
    status=1
  fi
done
# `waited PID LOG WHAT`: the backend-ops run PID's result from LOG, or its failures and a FAIL line naming WHAT.
# serve --device cuda with a KV cache of 39 pages (2 attention layers, so 304 tokens across the streams): a prompt
# longer than that gets a clear 400 and the server goes on; 3 concurrent 108-token requests (14 pages each) take
# turns for pages and each equals the same request alone.
port=18791
"$bin" serve --device cuda --model fixtures/tiny-mlx-4bit --port $port --kv-cache-gib 0.0003 --prefill-chunk 64 \
  > "$emu/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do curl -s "localhost:$port/health" > /dev/null 2>&1 && break; sleep 1; done
long=$(python3 -c 'print({"prompt": [i % 500 + 1 for i in range(400)], "max_tokens": 4})' | tr "'" '"' |
  curl -s -w " HTTP %{http_code}" "localhost:$port/v1/completions" -H 'content-type: application/json' -d @-)
echo "serve, a 404-token request: $long"
case "$long" in *"KV pages"*"HTTP 400") ;; *) echo "FAIL: no clear 400 for a request the KV cache cannot hold"; status=1 ;; esac
if ! "$bin" bench concurrent --url "http://127.0.0.1:$port" --levels 3 --alone --prompt-tokens 100 \
  --max-tokens 8 --prompt-vocab 500 > "$emu/serve-bench.log" 2>&1; then
  cat "$emu/serve-bench.log"; echo "FAIL: concurrent requests through a small KV cache"; status=1
fi
grep -E "^\| 3 |KV cache" "$emu/serve-bench.log" "$emu/serve.log" || true
kill $server; wait $server 2> /dev/null || true
waited() {
  if wait "$1"; then
    grep "^backend-ops" "$2"
  else
    grep -E "^backend-ops|^FAIL|panicked|error" "$2" | head -20
    echo "FAIL: $3 on the emulator"
    status=1
  fi
}
waited $attention "$emu/attention-ops.log" "the attention, prompt-kernel, shared-launch, DeltaNet and row-wise checks"
waited $few "$emu/pairs-few-ops.log" "the shared-launch checks with bf16 rounds on wgmma from 5 rows"
exit $status
