#!/bin/bash
# gpu_cache138.sh FINAL BUDGET_S NEW OLD: (call 138) gpu_cache137.sh's steps again, with NEW now also taking a
# prompt's snapshot one row before its end only (eca3d3b; OLD still a79868a: 1 GiB, snapshots at the prompt's end
# and one row before). Call 138 ran a copy of gpu_cache137.sh whose header said this; the steps are the same.
exec bash "$(dirname "$0")/gpu_cache137.sh" "$@"
