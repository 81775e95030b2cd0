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
