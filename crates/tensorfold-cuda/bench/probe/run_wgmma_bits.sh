#!/bin/bash
# run_wgmma_bits.sh: builds and runs the wgmma-vs-mma.sync bit-identity probe (wgmma_bits.cu) on sm_90; stdout.
set -o pipefail
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" -O2 -arch=sm_90a -std=c++17 -o /tmp/wgmma_bits "$(dirname "$0")/wgmma_bits.cu" && /tmp/wgmma_bits
