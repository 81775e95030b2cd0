# steps.sh: sourced by the gpu_*.sh scripts. Needs BUDGET (seconds); T0 (start, epoch seconds), OUT (log dir) and
# the kernel cache default to now, /tmp/tflogs and /tmp/tfcache when the script has not set them.
OUT=${OUT:-/tmp/tflogs}
T0=${T0:-$(date +%s)}
export TENSORFOLD_CACHE_DIR=${TENSORFOLD_CACHE_DIR:-/tmp/tfcache}
mkdir -p "$OUT"
# `step NAME SECONDS CMD...` runs CMD under a timeout when at least SECONDS of the budget are left, logging to
# $OUT/NAME.log and printing its exit status and duration; otherwise it prints SKIP.
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
step() {
  local name=$1 need=$2; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "SKIP $name (budget)"; return; fi
  local t=$(date +%s)
  timeout $(( $(left) - 5 )) "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t ))s"
}

# `all_checks BIN`: the GPU's name and clocks, backend-ops, the built-in model's equality suite and every fixture's
# full suite (with its float64 oracle), then a summary of their results.
all_checks() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/env.log" 2>&1
  step check-ops 90 "$1" check --device cuda --ops --quick --model fixtures/tiny-wrapper-bf16
  step check-coder 30 "$1" check --device cuda --quick --model models/tensorfold-coder-tiny
  for f in tiny-wrapper-bf16 tiny-mlx-4bit tiny-mlx-mixed tiny-flat-f32-sharded tiny-flat-f16-notok; do
    step full-$f 40 "$1" check --device cuda --model fixtures/$f
  done
  grep -hE "^backend-ops|^oracle|cases,|^FAIL|^DIFF|^error|panicked" "$OUT"/check-*.log "$OUT"/full-*.log | head -30
}

# `first_check BIN`: backend-ops and tiny-mlx-4bit's quick suite within 60 s, so that a kernel that hangs (a barrier
# never completing) cannot eat the budget; ends the script (logs gathered into $FINAL) unless every check passed.
first_check() {
  timeout 60 "$1" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit > "$OUT/first.log" 2>&1
  echo "first rc=$?"; grep -E "^backend-ops|^FAIL|cases," "$OUT/first.log" | head
  grep -q "0 failed" "$OUT/first.log" || { finish "$FINAL"; exit 1; }
}

# `tiny_shas BIN`: the token shas of 64 and 300 greedy tokens on tiny-mlx-4bit and tiny-wrapper-bf16.
tiny_shas() {
  for m in tiny-mlx-4bit tiny-wrapper-bf16; do
    for n in 64 300; do
      step run-$m-$n 20 "$1" run --device cuda --model fixtures/$m --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens $n --ignore-eos --json
      echo "run-$m-$n $(tail -1 "$OUT/run-$m-$n.log" | grep -o '"token_sha":"[0-9a-f]*"')"
    done
  done
}

# `quick NAME MODEL BIN [ENV...]`: BIN's quick bench (decode, rounds of 1 and 16 rows, a 2k prefill; best of 2) on
# MODEL, under the environment settings ENV, logged as NAME; prints its result lines.
quick() {
  local name=$1 model=$2 bin=$3; shift 3
  step "$name" 40 env "$@" "$bin" bench --device cuda --model "$model" --decode-tokens 16 --repeat 2 --quick --prefill-lens 2048
  grep -E 'prefill|decode, 1|round of|loaded' "$OUT/$name.log" | sed "s/^/$name /"
}

# `variants PREFIX MODEL ROUNDS NAME=ENV...`: quick benches of $BIN (the script's binary) on MODEL under each NAME's
# ENV (space-separated settings) in turn, ROUNDS times, logged as PREFIX-NAME-R.
variants() {
  local p=$1 model=$2 rounds=$3; shift 3
  for r in $(seq 1 "$rounds"); do
    for v in "$@"; do quick "$p-${v%%=*}-$r" "$model" "$BIN" ${v#*=}; done
  done
}

# `finish FINAL`: prints the total time and gathers every log into FINAL/all.log.
finish() {
  echo "total $(( $(date +%s) - T0 ))s"
  for f in "$OUT"/*.log; do echo "===== $(basename $f)"; cat "$f"; done > "$1/all.log"
}

# `full_check BIN`: first_check, all_checks and tiny_shas, the checks every kernel change runs before timing.
full_check() {
  first_check "$1"
  all_checks "$1"
  tiny_shas "$1"
}

# `alternate PREFIX MODEL ROUNDS OLD NEW`: quick benches of OLD and NEW in turn, ROUNDS times, logged as
# PREFIX-old-R and PREFIX-new-R.
alternate() {
  local p=$1 model=$2 rounds=$3 old=$4 new=$5
  for r in $(seq 1 "$rounds"); do
    quick "$p-old-$r" "$model" "$old"
    quick "$p-new-$r" "$model" "$new"
  done
}

# `profile_decode NAME MODEL BIN [ENV...]`: the event profile of 8 decode rounds (TENSORFOLD_CUDA_PROFILE=1) under
# ENV, logged as NAME; prints its first kernels.
profile_decode() {
  local name=$1 model=$2 bin=$3; shift 3
  step "$name" 40 env "$@" TENSORFOLD_CUDA_PROFILE=1 "$bin" bench --device cuda --model "$model" --decode-tokens 16 \
    --repeat 1 --quick --prefill-lens 2048
  sed -n '/profile of 8 decode rounds/,/^launches/p' "$OUT/$name.log" | head -14 | sed "s/^/$name /"
}

# `sweep NAME MODEL LENS BIN`: BIN's whole bench of MODEL (copy bandwidth, decode against the bound, rounds of 1 to
# 64 rows, aggregate decode, prefills of LENS and decode at those contexts), logged as NAME; prints its table.
sweep() {
  step "$1" 150 "$4" bench --device cuda --model "$2" --decode-tokens 32 --repeat 2 --prefill-lens "$3"
  grep -E "^\||copy|weights read" "$OUT/$1.log" | cut -c1-120 | sed "s/^/$1 /"
}

# `peer NAME DIR`: transformers + torch on the checkpoint DIR (peer_transformers.py), logged as NAME; skipped when
# DIR is missing (its synth step skipped for the budget).
peer() {
  [ -d "$2" ] || { echo "SKIP $1 (no $2)"; return; }
  step "$1" 90 python3 "$(dirname "${BASH_SOURCE[0]}")/peer_transformers.py" "$2" 32
  grep -E "^\||peer load" "$OUT/$1.log" | sed "s/^/$1 /"
}

# `ncu_bin`: Nsight Compute's path on the GPU machine.
ncu_bin() { command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1; }

# `ncu_launches NAME KERNEL SKIP COUNT BIN MODEL SECTIONS...`: Nsight Compute on COUNT launches of KERNEL after SKIP,
# in a short decode bench of MODEL, with those report sections (`--section` each); logged as NAME; prints its main
# figures (a launch is told apart by its grid size).
ncu_launches() {
  local name=$1 kernel=$2 skip=$3 count=$4 bin=$5 model=$6; shift 6
  local ncu sections=()
  ncu=$(ncu_bin)
  for s in "$@"; do sections+=(--section "$s"); done
  step "$name" 60 "$ncu" --kernel-name "$kernel" --launch-skip "$skip" --launch-count "$count" "${sections[@]}" \
    "$bin" bench --device cuda --model "$model" --decode-tokens 8 --repeat 1 --quick --prefill-lens 64
  grep -E "Duration|Throughput|Issue|Eligible|Active Warps|Registers|Warp Cycles|Block Limit|Stall|stall|Grid Size|Block Size" \
    "$OUT/$name.log" | head -40 | sed "s/^/$name /"
}

# `memcheck BIN`: compute-sanitizer's memcheck on tiny-mlx-4bit's full suite and the built-in model's quick suite
# (about 80 and 75 s on the H200); prints each run's error summary. Calls 107-108 found two use-after-frees this way
# that the suites only showed now and then.
memcheck() {
  local cs
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  step memcheck-4bit 90 "$cs" --print-limit 10 "$1" check --device cuda --model fixtures/tiny-mlx-4bit
  step memcheck-coder 90 "$cs" --print-limit 10 "$1" check --device cuda --quick --model models/tensorfold-coder-tiny
  grep -HE "ERROR SUMMARY|cases," "$OUT"/memcheck-*.log | sed "s|^$OUT/||"
}

# `serve_twice NAME BIN MODEL CLIENT [SERVE_ARGS...]`: BIN serves MODEL on the GPU (with SERVE_ARGS); CLIENT's
# `bench concurrent` sends 16 streams of 1,024-token prompts (64-token replies), each then again alone (`--alone`:
# replies compared), then the same 16 together again (warm); the prompt cache's metrics after each run. Logged as
# NAME-serve, NAME-cold, NAME-warm.
serve_twice() {
  local name=$1 bin=$2 M=$3 NEW=$4; shift 4
  if [ "$(left)" -lt 50 ]; then echo "SKIP $name (budget)"; return; fi
  "$bin" serve --device cuda --model $M --port 8321 "$@" > "$OUT/$name-serve.log" 2>&1 &
  local pid=$! up=0
  for i in $(seq 1 120); do curl -s localhost:8321/health > /dev/null 2>&1 && { up=1; break; }; sleep 0.5; done
  if [ $up = 1 ]; then
    for run in cold warm; do
      local alone=""; [ $run = cold ] && alone=--alone
      step "$name-$run" 40 "$NEW" bench concurrent --url http://127.0.0.1:8321 --levels 16 --prompt-tokens 1024 \
        --max-tokens 64 --prompt-vocab 248000 --seed 5 $alone
      curl -s localhost:8321/metrics | grep -E "^tensorfold_prompt_cache" > "$OUT/$name-$run-metrics.log"
    done
  fi
  kill $pid; wait $pid 2> /dev/null
  grep -hE "KV cache" "$OUT/$name-serve.log" | sed "s/^/$name-serve /"
  for run in cold warm; do
    grep -E "^\| [0-9]|DIFF|rror" "$OUT/$name-$run.log" | sed "s/^/$name-$run /"
    sed "s/^/$name-$run-metrics /" "$OUT/$name-$run-metrics.log" 2> /dev/null
  done
  grep -E "panicked|rror" "$OUT/$name-serve.log" | head -4 | sed "s/^/$name-serve /"
}

# `at_context NAME MODEL LENS [ENV...]`: `bench --at-context` (each prefill of LENS, then one-stream decode at that
# context) on MODEL under the environment settings ENV, logged as NAME; prints its prefill and decode lines.
at_context() {
  local name=$1 model=$2 lens=$3; shift 3
  step "$name" 45 env "$@" "$BIN" bench --device cuda --model "$model" --at-context --prefill-lens "$lens"
  grep -E 'prefill|decode at' "$OUT/$name.log" | cut -c1-110 | sed "s/^/$name /"
}

# `ncu_kernel NAME KERNEL SKIP COUNT BIN MODEL PREFILL [ENV...]`: Nsight Compute (clocks left alone) on COUNT launches
# of KERNEL (exact name) after SKIP in `bench --quick` of MODEL with a PREFILL-token prefill, under ENV: speed of
# light, pipes, occupancy and each stall reason's cycles per issued instruction; logged as NAME, main lines printed.
ncu_kernel() {
  local name=$1 kernel=$2 skip=$3 count=$4 bin=$5 model=$6 pl=$7; shift 7
  local ncu
  ncu=$(ncu_bin)
  step "$name" 30 env "$@" "$ncu" --clock-control none --kernel-name "$kernel" --launch-skip "$skip" \
    --launch-count "$count" --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    "$bin" bench --device cuda --model "$model" --decode-tokens 4 --repeat 1 --quick --prefill-lens "$pl"
  grep -E "^  [a-z_0-9]+ \(|Duration|Compute \(SM\)|L2 Cache Throughput|highest-utilized|issue_stalled" "$OUT/$name.log" \
    | awk '!/issue_stalled/ || $NF+0 >= 0.1' | head -60 | sed "s/^/$name /"
}

# `image_checks NAME BIN ENV`: backend-ops and two fixtures' full suites (with the oracle) on the kernel image ENV
# selects (`TENSORFOLD_CUDA_DEFINES=...`), logged as NAME-*; prints their results.
image_checks() {
  local name=$1 bin=$2 e=$3
  step "$name-check-ops" 30 env "$e" "$bin" check --device cuda --ops --quick --model fixtures/tiny-mlx-4bit
  for f in tiny-mlx-4bit tiny-wrapper-bf16; do
    step "$name-full-$f" 30 env "$e" "$bin" check --device cuda --model fixtures/$f
  done
  grep -hE "^backend-ops|^oracle|cases,|^FAIL|^error|panicked" "$OUT/$name"-*.log
}

# `alternate_images PREFIX MODEL ROUNDS BIN NAME_B ENV_B NAME_C ENV_C`: quick benches of BIN's main image and of the
# images ENV_B and ENV_C in turn, ROUNDS times, logged as PREFIX-main-R, PREFIX-NAME_B-R and PREFIX-NAME_C-R.
alternate_images() {
  local p=$1 model=$2 rounds=$3 bin=$4 nb=$5 eb=$6 nc=$7 ec=$8
  for r in $(seq 1 "$rounds"); do
    quick "$p-main-$r" "$model" "$bin"
    quick "$p-$nb-$r" "$model" "$bin" "$eb"
    quick "$p-$nc-$r" "$model" "$bin" "$ec"
  done
}
