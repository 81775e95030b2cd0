#!/usr/bin/env python3
"""sass_loops.py CUBIN KERNEL: the loops of one kernel's SASS (each backward branch and its body), with the
instruction count and the most frequent opcodes. This is how BENCHMARKS.md counts instructions per loop trip
(e.g. the weight stream's 137 → 123 at one row).

Needs cuobjdump on PATH (`pip download nvidia-cuda-cuobjdump`, unpack the wheel, add its nvidia/cu13/bin) and a
cubin from the NVRTC test: `TENSORFOLD_NVRTC_DIR=<nvrtc lib dir> TENSORFOLD_CUBIN_OUT=DIR cargo test -p
tensorfold-cuda --test nvrtc_compile` writes DIR/sm_90.cubin and DIR/sm_90a.cubin."""
import re
import subprocess
import sys

cubin, kernel = sys.argv[1], sys.argv[2]
sass = subprocess.run(["cuobjdump", "-sass", "-fun", kernel, cubin], capture_output=True, text=True,
                      check=True).stdout
ins = []
for line in sass.splitlines():
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
    if m:
        ins.append((int(m.group(1), 16), m.group(2)))
for at, text in ins:
    m = re.search(r"BRA\s.*?0x([0-9a-f]+)", text)
    if not m or int(m.group(1), 16) >= at:
        continue
    start = int(m.group(1), 16)
    body = [t for a, t in ins if start <= a <= at]
    ops = {}
    for t in body:
        op = re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0]
        ops[op] = ops.get(op, 0) + 1
    top = ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:12])
    print(f"loop {start:#06x}..{at:#06x}: {len(body)} instructions ({top})")
