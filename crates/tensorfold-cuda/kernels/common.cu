// common.cu: the prelude every kernel file is compiled with: element conversions on raw bits (no CUDA headers
// needed), fixed-order warp reductions, and the activations shared with the CPU twin.
// Every reduction here has one order that depends only on the element count, never on rows or launch shape.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)

// Dynamic shared memory: the GPU's extern array, the emulator's buffer of the launch.
#ifdef TF_EMU
#define DYNAMIC_SMEM(name) unsigned char* name = emu_dynamic_smem()
#else
#define DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// The first statement of every kernel. Kernels are launched with programmatic stream serialization (device.rs):
// one may be scheduled while the kernel before it in the stream is still finishing, which hides most of the gap
// between two dependent launches. So each kernel first waits for its predecessor's completion and memory
// (griddepcontrol.wait; immediate when launched without the attribute) and touches no global memory before
// that, then lets its own successor be scheduled (griddepcontrol.launch_dependents: the successor is launched once
// every block of this grid has run it). A successor's wait covers this kernel's whole run, so every access still
// happens in stream order.
// The trigger stays after the wait (BENCHMARKS.md §7, calls 174-175): with every kernel triggering first, 1-row
// rounds were 5-6% slower (kernels two and more launches ahead took SM slots and copied weights early), and with
// only the small kernels (norms, SwiGLU, DeltaNet steps) triggering first, so that the next projection launched
// while the one before the small kernel drained, 27B and 9B MLX4 1-row rounds were 8-9% slower; 16-row rounds
// gained 1-2% either way.
__device__ __forceinline__ void kernel_entry() {
#ifndef TF_EMU
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The first statement of a kernel that reads weights before kernel_entry: it marks (and does nothing) that the
// kernel calls kernel_entry itself once it has started copying its first weight bytes. Weights are written only
// at upload, before any kernel runs, so reading them while the predecessor finishes cannot race; anything else a
// kernel reads or writes waits for kernel_entry as usual (the 1-row weight streams, project_stream.cu and
// project_mma_bf16, and the wgmma rounds).
__device__ __forceinline__ void entry_after_weights() {}

// The last statement of a decode projection: its last `blocks` blocks, as they finish, ask L2 for the first bytes
// of the projection that came after this one last round (src/ahead.rs learns which), up to three ranges (4-bit
// codes, scales, biases; bf16 weights), each split evenly over those blocks. Between two projections of a decode
// round the small kernels (norms, SwiGLU, DeltaNet steps, attention) leave memory idle for several µs; bytes
// prefetched then are bytes the next projection's first blocks find in L2. A hint only: nothing is written and no
// kernel reads anything else, so no bits can depend on it. Ranges of 0 bytes ask for nothing.
__device__ __forceinline__ void l2_ahead_range(const unsigned char* p, u64 n, u32 i, u32 k) {
    const u64 chunk = ((n + k - 1) / k + 15) & ~(u64)15, off = (u64)i * chunk;
    if (off >= n) return;
    const u32 size = (u32)((chunk < n - off ? chunk : n - off) & ~(u64)15);
#ifndef TF_EMU
    if (size) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(size) : "memory");
#else
    (void)size;
#endif
}
__device__ __forceinline__ void l2_ahead(const unsigned char* p0, u64 n0, const unsigned char* p1, u64 n1,
                                         const unsigned char* p2, u64 n2, int blocks) {
    const u32 nb = gridDim.x * gridDim.y * gridDim.z;
    const u32 b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    const u32 k = min(nb, (u32)max(blocks, 1));
    if (b < nb - k || threadIdx.x >= 3) return;
    const u32 i = b - (nb - k);
    if (threadIdx.x == 0) l2_ahead_range(p0, n0, i, k);
    if (threadIdx.x == 1) l2_ahead_range(p1, n1, i, k);
    if (threadIdx.x == 2) l2_ahead_range(p2, n2, i, k);
}
// The arguments l2_ahead takes, at the end of a decode projection's list.
#define L2_AHEAD_ARGS                                                                                   \
    const unsigned char *ahead0, u64 ahead_n0, const unsigned char *ahead1, u64 ahead_n1,               \
        const unsigned char *ahead2, u64 ahead_n2, int ahead_blocks
#define L2_AHEAD() l2_ahead(ahead0, ahead_n0, ahead1, ahead_n1, ahead2, ahead_n2, ahead_blocks)

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

// Exact IEEE half → float on the bits (subnormals, infinities and NaNs included).
__device__ __forceinline__ float f16_to_f32(u16 h) {
    const u32 sign = ((u32)h & 0x8000u) << 16, exp = ((u32)h >> 10) & 0x1fu, man = (u32)h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp != 0) return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
    const float mag = (float)man * 5.9604644775390625e-8f;  // man · 2^-24, exact
    return sign ? -mag : mag;
}

// Element readers by stored dtype: 0 = f32, 1 = f16, 2 = bf16.
struct F32T { typedef float raw; static __device__ __forceinline__ float get(float v) { return v; } };
struct F16T { typedef u16 raw; static __device__ __forceinline__ float get(u16 v) { return f16_to_f32(v); } };
struct BF16T { typedef u16 raw; static __device__ __forceinline__ float get(u16 v) { return bf16_to_f32(v); } };

// Butterfly sum over the 32 lanes: every lane ends with the same bits (each level adds the same two values).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
    return v;
}

// s[0] + s[1] + … + s[n − 1] in that order (n ≤ 32), its loads unrolled with a guard so they go out together.
__device__ __forceinline__ float sum_in_order(const float* s, int n) {
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < 32; ++w)
        if (w < n) t += s[w];
    return t;
}

// Sum over a block of `nwarps` full warps (blockDim.x = 32 * nwarps): lane-strided partials, warp butterflies,
// then warp totals added in warp order. `scratch` holds at least 32 floats. Every thread returns the same bits.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return sum_in_order(scratch, nwarps);
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Round row metadata `meta[5·i..]`: slot, position, committed length, path, path length. The path lists the row's
// ancestors in the round, root first, ending with the row itself: at `paths + path` when path >= 0, or the
// consecutive round rows −path−1, −path, … (a chain, the common case) when path < 0.
__device__ __forceinline__ int path_at(const int* __restrict__ m, const int* __restrict__ paths, int j) {
    return m[3] >= 0 ? paths[m[3] + j] : -m[3] - 1 + j;
}

// The tile-major layout of 4-bit matrices on the tensor-core path (ops.rs tile_major, made at upload): codes
// [tiles of 16 outputs][groups][16 outputs][group bytes], scales and biases [tiles][groups][16 outputs], the last
// tile padded with zeros. A warp's share of one group of one tile is then one contiguous run of bytes (the
// checkpoint's row-major order scatters it over 16 rows, which streamed at ~3.1 TB/s against ~4.0 on the H200).
// Byte offset of output o's codes for group G (gb bytes a group), and the index of its scale and bias.
__device__ __forceinline__ size_t a4_tile_code(int o, int G, int groups, int gb) {
    return (((size_t)(o >> 4) * groups + G) * 16 + (o & 15)) * gb;
}
__device__ __forceinline__ size_t a4_tile_param(int o, int G, int groups) {
    return ((size_t)(o >> 4) * groups + G) * 16 + (o & 15);
}
