#!/bin/bash
# gpu_many.sh FINAL BUDGET_S OLD NEW: call 51. Matrices sharing an input in one launch (project_many) and the
# recurrence's fused gated norm (NEW) against OLD (21dc682), in turn; each change switched off alone; and what each
# kernel costs in the chain of dependent launches (TENSORFOLD_CUDA_TWICE: the kernel launched twice, a timing
# ablation whose tokens mean nothing).
FINAL=${1:?out dir}; BUDGET=${2:-400}; OLD=${3:?old binary}; NEW=${4:?new binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
all_checks "$NEW"
step synth-27b-mlx4 60 "$NEW" synth --shape 27b --format mlx4 --out /tmp/s27m4
for i in 1 2; do
  quick 27b-old-$i /tmp/s27m4 "$OLD"
  quick 27b-new-$i /tmp/s27m4 "$NEW"
done
quick 27b-nomany /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_PAIR=0 TENSORFOLD_CUDA_MMA_WIDE=1024
quick 27b-nodnnorm /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_DN_NORM=0
for k in add_rms_norm swiglu dn_conv dn_recur dn_tail_keep attn_prep attn_chunk kv_keep project_stream; do
  quick 27b-twice-$k /tmp/s27m4 "$NEW" TENSORFOLD_CUDA_TWICE=$k
done
rm -rf /tmp/s27m4
step synth-9b-mlx4 40 "$NEW" synth --shape 9b --format mlx4 --out /tmp/s9m4
for i in 1 2; do
  quick 9b-old-$i /tmp/s9m4 "$OLD"
  quick 9b-new-$i /tmp/s9m4 "$NEW"
done
rm -rf /tmp/s9m4
finish "$FINAL"
