#!/usr/bin/env bash
# The CPU benchmark sweep behind BENCHMARKS.md: synthetic Qwen3.5-0.8B-shape checkpoints in bf16 and MLX 4-bit,
# decode/prefill against this machine's read bandwidth (measured in the same run), then round costs and the
# prompt cache. Usage: tools/bench_cpu.sh [OUT_DIR]   (needs ~2.5 GB of disk under OUT_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-/tmp/tensorfold-bench}"
mkdir -p "$out"
cargo build --release -p tensorfold
tf=target/release/tensorfold
[ -f "$out/q08-bf16/config.json" ] || $tf synth --shape 0.8b --format bf16 --out "$out/q08-bf16"
[ -f "$out/q08-mlx4/config.json" ] || $tf synth --shape 0.8b --format mlx4 --out "$out/q08-mlx4"
echo "commit $(git rev-parse --short HEAD), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for fmt in bf16 mlx4; do
  $tf bench --model "$out/q08-$fmt" --prompt-tokens 128 --decode-tokens 32 --repeat 2
done
$tf bench --model "$out/q08-bf16" --rounds --context 64 --long-prompt 512 --repeat 5
