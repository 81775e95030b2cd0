"""Writes the kernel table of the CPU emulator: one wrapper per extern "C" __global__ kernel that unpacks the
driver's `void** params` into the kernel's arguments (found by preprocessing the concatenated sources)."""
import re, subprocess, sys

src, inc = sys.argv[1], sys.argv[2]
pre = subprocess.run(["g++", "-E", "-P", "-std=c++17", "-I", inc, "-D__global__=TF_GLOBAL", src],
                     check=True, capture_output=True, text=True).stdout
pre = pre.replace("\n", " ")
kernels = re.findall(r'extern\s+"C"\s+TF_GLOBAL\s+void\s+(\w+)\s*\(([^)]*)\)', pre)
print('struct EmuKernel { const char* name; void (*fn)(void**); };')
for name, params in kernels:
    types = []
    for p in params.split(","):
        p = p.strip()
        m = re.match(r"(.*?)(\w+)$", p)
        types.append(m.group(1).strip())
    decl = ", ".join(types)
    args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
    print(f"static void w_{name}(void** a) {{ {name}({args}); }}")
print("extern const EmuKernel emu_kernels[] = {")
for name, _ in kernels:
    print(f'  {{"{name}", w_{name}}},')
print("};")
print(f"extern const int emu_kernel_count = {len(kernels)};")
