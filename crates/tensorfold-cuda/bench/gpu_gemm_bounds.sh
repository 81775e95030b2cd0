#!/bin/bash
# gpu_gemm_bounds.sh (call 23): the 4-bit prompt kernel with launch bounds (128, 3) (base) against (128, 2) (v1), two
# binaries alternated twice on the 27B MLX 4-bit shape: quick decode and prefill at 2k and 8k tokens.
set -e
for b in base v1; do python3 -c "import lzma,shutil;shutil.copyfileobj(lzma.open('.gpux/tf_$b.xz'),open('/tmp/tf_$b','wb'))"; chmod +x /tmp/tf_$b; done
export TENSORFOLD_CACHE_DIR=/tmp/tfcache
mkdir -p $OUT/call23
/tmp/tf_base synth --shape 27b --format mlx4 --out /tmp/s27m4 > $OUT/call23/synth.log 2>&1
for i in 1 2; do for b in base v1; do
  timeout 60 /tmp/tf_$b bench --device cuda --model /tmp/s27m4 --decode-tokens 16 --repeat 1 --quick --prefill-lens 2048,8192 > $OUT/call23/$b-$i.log 2>&1 || echo "rc=$?"
  echo "$b $i: $(grep -E 'prefill|decode, 1' $OUT/call23/$b-$i.log | tr '\n' ' ')"
done; done
