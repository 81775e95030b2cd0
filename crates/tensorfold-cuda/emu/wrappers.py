"""Writes the kernel table of the CPU emulator: one wrapper per extern "C" __global__ kernel that unpacks the
driver's `void** params` into the kernel's arguments, and the arguments' sizes (found by preprocessing the
concatenated sources with the macros given after the include directory, EMU_DEFINES)."""
import re, subprocess, sys

src, inc, defines = sys.argv[1], sys.argv[2], sys.argv[3:]
pre = subprocess.run(["g++", "-E", "-P", "-std=c++17", "-I", inc, "-D__global__=TF_GLOBAL",
                      "-DTF_CLUSTER(n)=tf_cluster_is n", *defines, src],
                     check=True, capture_output=True, text=True).stdout
pre = pre.replace("\n", " ")
found = re.findall(r'extern\s+"C"\s+TF_GLOBAL\s+void\s+(?:tf_cluster_is\s+(\d+)\s+)?(\w+)\s*\(([^)]*)\)', pre)
kernels = [(name, params) for _, name, params in found]
clusters = {name: int(cl or 1) for cl, name, _ in found}
print('struct EmuKernel { const char* name; void (*fn)(void**); int nargs; const int* sizes; int cluster; };')
for name, params in kernels:
    types = []
    for p in params.split(","):
        p = p.strip()
        m = re.match(r"(.*?)(\w+)$", p)
        types.append(m.group(1).strip())
    decl = ", ".join(types)
    args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
    print(f"static void w_{name}(void** a) {{ {name}({args}); }}")
    # Argument sizes, so a captured graph node can keep copies of its arguments.
    sizes = ", ".join(f"(int)sizeof({t})" for t in types)
    print(f"static const int s_{name}[] = {{{sizes}}};")
print("extern const EmuKernel emu_kernels[] = {")
for name, params in kernels:
    n = len(params.split(","))
    print(f'  {{"{name}", w_{name}, {n}, s_{name}, {clusters[name]}}},')
print("};")
print(f"extern const int emu_kernel_count = {len(kernels)};")
