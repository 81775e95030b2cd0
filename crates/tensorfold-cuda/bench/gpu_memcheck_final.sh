#!/bin/bash
# gpu_memcheck_final.sh FINAL BUDGET_S BIN: (call 113) memcheck on the session's final binary.
FINAL=${1:?out dir}; BUDGET=${2:-250}; BIN=${3:?binary}
. "$(dirname "$0")/steps.sh"
mkdir -p "$FINAL"
memcheck "$BIN"
finish "$FINAL"
