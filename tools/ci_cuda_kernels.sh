#!/usr/bin/env bash
# CI without a GPU: compiles every CUDA kernel with NVRTC taken from NVIDIA's pip wheel (sm_90 and sm_90a), lints
# the binary built with `--features cuda` (the `--device cuda` paths of run, serve, check and bench), and decodes on
# the CPU emulator with CUDA graphs on and off (tools/ci_cuda_emulator.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${NVRTC_VENV:-target/nvrtc-venv}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! compgen -G "$venv/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so.13" >/dev/null; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "nvidia-cuda-nvrtc==13.0.88"
fi
# Absolute: the test runs from its crate's folder.
dir="$(cd "$(dirname "$(compgen -G "$venv/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so.13" | head -1)")" && pwd)"
echo "NVRTC from $dir"
TENSORFOLD_NVRTC_DIR="$dir" TENSORFOLD_REQUIRE_NVRTC=1 \
  cargo test -p tensorfold-cuda --test nvrtc_compile -- --nocapture
cargo clippy -p tensorfold --features cuda --all-targets -- -D warnings
tools/ci_cuda_emulator.sh "$dir"
