#!/bin/bash
# gpu_call162.sh FINAL BUDGET_S BIN: TF_FRESH_GROUPS (call 161: 16-row rounds 5% and 2k prefills 7% faster, every
# check passed) through every check (every fixture's full suite, the built-in model's, the tiny shas), then timed
# against the default in turn on the 9B MLX4 shape (quick benches) and on 27B MLX4 16k prefills.
FINAL=${1:?out dir}; BUDGET=${2:-260}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
FB=$PWD/.bin/tf-fresh
printf '#!/bin/sh\nTENSORFOLD_CUDA_DEFINES=-DTF_FRESH_GROUPS exec %s "$@"\n' "$(readlink -f "$BIN")" > "$FB"; chmod +x "$FB"
all_checks "$FB"
tiny_shas "$FB"
M=/dev/shm/s9m4
step synth-9b-mlx4 40 "$BIN" synth --shape 9b --format mlx4 --threads 16 --out $M
for r in 1 2; do
  quick m9-default-$r $M "$BIN"
  quick m9-fresh-$r $M "$FB"
done
rm -rf $M
M=/dev/shm/s27m4
step synth-27b-mlx4 60 "$BIN" synth --shape 27b --format mlx4 --threads 16 --out $M
at_context default-16k $M 16384
at_context fresh-16k $M 16384 TENSORFOLD_CUDA_DEFINES=-DTF_FRESH_GROUPS
rm -rf $M
finish "$FINAL"
