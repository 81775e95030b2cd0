# steps.sh: sourced by the gpu_*.sh scripts. Needs BUDGET (seconds), T0 (start, epoch seconds) and OUT (log dir).
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
