#!/bin/sh
# build.sh OUTDIR: builds OUTDIR/libcuda.so, the CPU stand-in driver that runs this crate's kernels (emu.cpp).
# Then: LD_LIBRARY_PATH=OUTDIR:<nvrtc dir> tensorfold check --device cuda ...   (or the crate's tests).
# EMU_DEFINES (e.g. "-DTF_ZEROED_GROUPS") builds the kernels with those macros, as TENSORFOLD_CUDA_DEFINES does on the GPU.
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
src="$out/kernels_cpu.cpp"
{
  echo '#include "emu.h"'
  for f in common project project_mma project_stream project_gemm project_wgmma project_wgmma_bf16 rowwise attention attention_tiles attention_lanes attention_block project_wgmma_gemm project_wgmma_gemm_pipe deltanet deltanet_batch deltanet_octets sample; do echo "// ---- $f.cu"; cat "$here/../kernels/$f.cu"; echo; done
} > "$src"
# The wrappers see the same macros as the kernels (a switch may change a kernel's arguments).
python3 "$here/wrappers.py" "$src" "$here" ${EMU_DEFINES:-} > "$out/wrappers.inc"
cat "$out/wrappers.inc" >> "$src"
g++ -O2 -g -U_FORTIFY_SOURCE -std=c++17 ${EMU_DEFINES:-} -fPIC -shared -Wno-unknown-pragmas -I"$here" -o "$out/libcuda.so" "$here/emu.cpp" "$here/limits.cpp" "$src"
ln -sf libcuda.so "$out/libcuda.so.1"
echo "built $out/libcuda.so"
