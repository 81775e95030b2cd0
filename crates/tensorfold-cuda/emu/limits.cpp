// limits.cpp: the emulator refuses a launch the GPU would refuse for its registers or shared memory, reading each
// kernel's registers and static shared memory from the cubin the host loads (NVRTC's real build for the device).
//
// Why: the emulator runs kernels as CPU code, so a kernel whose registers times its block's threads exceed an SM's
// register file still ran here while the GPU failed the launch (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: an unrolled
// block_sum took rms_norm to 70 registers, launched with 1,024 threads; only the GPU caught it, call 156). The host
// code that picks each launch's block size runs unchanged on the emulator, so checking here checks every launch CI
// makes.
//
// Where the numbers are (the cubin is an ELF file): section `.text.NAME` holds kernel NAME's code, its sh_info the
// kernel's symbol index; the `.nv.info` section's EIATTR_REGCOUNT records (attribute 0x2f, format 4: a 4-byte
// symbol index, then the count) give each symbol's registers; `.nv.shared.NAME`'s size is NAME's static shared
// memory. These agree with `cuobjdump --dump-resource-usage`.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

namespace {
struct Limits { int regs = 0, static_smem = 0; };
std::map<std::string, Limits> kernel_limits;

template <typename T>
T read_at(const unsigned char* d, size_t at) {
    T v;
    memcpy(&v, d + at, sizeof v);
    return v;
}

// Hopper: 64 K registers a block (and an SM), given out a warp at a time in units of 256 (8 a thread); 227 KB of
// shared memory a block at most, static and dynamic together.
constexpr unsigned REGS_PER_BLOCK = 65536, REG_UNIT = 256, SMEM_PER_BLOCK = 232448;

unsigned regs_for(int regs, unsigned threads) {
    const unsigned per_warp = (regs * 32u + REG_UNIT - 1) / REG_UNIT * REG_UNIT;
    return (threads + 31) / 32 * per_warp;
}
}  // namespace

// Reads every kernel's registers and static shared memory from the ELF image `image` (ignored if it is not one).
void emu_read_cubin(const void* image) {
    const unsigned char* d = static_cast<const unsigned char*>(image);
    if (!d || memcmp(d, "\x7f" "ELF", 4) != 0 || d[4] != 2) return;  // 64-bit ELF only
    const uint64_t shoff = read_at<uint64_t>(d, 0x28);
    const unsigned shentsize = read_at<uint16_t>(d, 0x3a), shnum = read_at<uint16_t>(d, 0x3c),
                   shstrndx = read_at<uint16_t>(d, 0x3e);
    struct Sec { uint32_t name, info; uint64_t offset, size; };
    auto sec = [&](unsigned i) {
        const size_t h = shoff + (size_t)i * shentsize;
        return Sec{read_at<uint32_t>(d, h), read_at<uint32_t>(d, h + 0x2c), read_at<uint64_t>(d, h + 0x18),
                   read_at<uint64_t>(d, h + 0x20)};
    };
    const uint64_t names = sec(shstrndx).offset;
    auto name_of = [&](const Sec& s) { return std::string(reinterpret_cast<const char*>(d + names + s.name)); };
    std::map<uint32_t, int> regs_of_symbol;
    for (unsigned i = 0; i < shnum; ++i) {
        const Sec s = sec(i);
        if (name_of(s) != ".nv.info") continue;
        for (uint64_t p = s.offset; p + 4 <= s.offset + s.size;) {
            const unsigned format = d[p], attr = d[p + 1];
            if (format != 4) { p += 4; continue; }  // no value, a byte or a half word: 4 bytes a record
            const unsigned size = read_at<uint16_t>(d, p + 2);
            if (attr == 0x2f && size >= 8) regs_of_symbol[read_at<uint32_t>(d, p + 4)] = read_at<uint32_t>(d, p + 8);
            p += 4 + size;
        }
    }
    for (unsigned i = 0; i < shnum; ++i) {
        const Sec s = sec(i);
        const std::string n = name_of(s);
        if (n.rfind(".text.", 0) == 0) {
            const auto r = regs_of_symbol.find(s.info);
            if (r != regs_of_symbol.end()) kernel_limits[n.substr(6)].regs = r->second;
        } else if (n.rfind(".nv.shared.", 0) == 0) {
            kernel_limits[n.substr(11)].static_smem = (int)s.size;
        }
    }
}

// Kernel `name`'s registers a thread and static shared memory (0 and 0 when no cubin told them).
void emu_kernel_limits(const char* name, int* regs, int* static_smem) {
    const auto it = kernel_limits.find(name);
    *regs = it == kernel_limits.end() ? 0 : it->second.regs;
    *static_smem = it == kernel_limits.end() ? 0 : it->second.static_smem;
}

// The most threads a block of kernel `name` may have for its registers (1,024 if the registers allow it).
unsigned emu_max_threads(const char* name) {
    int regs, smem;
    emu_kernel_limits(name, &regs, &smem);
    unsigned t = 1024;
    while (t > 32 && regs_for(regs, t) > REGS_PER_BLOCK) t -= 32;
    return t;
}

// Whether the GPU would refuse a launch of `name` with `threads` a block and `dyn_smem` bytes of dynamic shared
// memory; if so, says why on stderr (as the driver's CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES does not).
bool emu_launch_refused(const char* name, unsigned threads, unsigned dyn_smem) {
    int regs, smem;
    emu_kernel_limits(name, &regs, &smem);
    if (regs_for(regs, threads) > REGS_PER_BLOCK) {
        fprintf(stderr,
                "emulator: kernel %s takes %d registers a thread, so a block of %u threads needs %u of the %u a "
                "block has: the GPU refuses this launch (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES); give the kernel "
                "__launch_bounds__(%u)\n",
                name, regs, threads, regs_for(regs, threads), REGS_PER_BLOCK, threads);
        return true;
    }
    if (smem + dyn_smem > SMEM_PER_BLOCK) {
        fprintf(stderr, "emulator: kernel %s asks for %d + %u bytes of shared memory, more than a block has (%u)\n",
                name, smem, dyn_smem, SMEM_PER_BLOCK);
        return true;
    }
    return false;
}
