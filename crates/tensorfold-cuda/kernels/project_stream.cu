// project_stream.cu: the MLX 4-bit tensor-core projection of project_mma.cu with its weight stream pipelined:
// each warp copies the codes, scales and biases of its next groups into shared memory with cp.async, D − 1
// groups ahead of the one it computes, so many bytes are in flight per warp without holding them in registers
// (project_mma.cu's warps wait a whole memory latency for every group; that is what held decode to ~0.9 TB/s).
//
// Arithmetic: exactly project_mma_a4's (the same groups per warp in the same order, the same mma sequence, x
// read as there, the same warp-order finish), so both kernels give the same bits and the row invariance argued
// in project_mma.cu carries over unchanged. Only where the weight bytes wait before the mma differs.


// A shared-memory address: 32 bits on the GPU (no generic-pointer arithmetic in the loop), a pointer in the
// CPU emulator.
#ifdef TF_EMU
typedef unsigned char* SmemAddr;
__device__ __forceinline__ SmemAddr smem_addr(unsigned char* p) { return p; }
#else
typedef u32 SmemAddr;
__device__ __forceinline__ SmemAddr smem_addr(unsigned char* p) {
    u32 s;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(s) : "l"(p));
    return s;
}
#endif

// 16 bytes global → shared, bypassing L1 (weights are read once); zero-filled when !valid (nothing is read).
__device__ __forceinline__ void cp_async16(SmemAddr dst, const void* src, bool valid) {
#ifdef TF_EMU
    if (valid) memcpy(dst, src, 16); else memset(dst, 0, 16);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
#endif
}

// 4 bytes global → shared (through L1: a block's warps read neighbouring scales); zero-filled when !valid.
__device__ __forceinline__ void cp_async4(SmemAddr dst, const void* src, bool valid) {
#ifdef TF_EMU
    if (valid) memcpy(dst, src, 4); else memset(dst, 0, 4);
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifndef TF_EMU
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifndef TF_EMU
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// The nibble mask 0x000f000f in a register the compiler cannot see through: given as a constant, ptxas
// re-creates it before every mask instruction (a tenth of the loop's instructions); from a shuffle it stays put.
__device__ __forceinline__ u32 opaque_nibble_mask() {
#ifdef TF_EMU
    return 0x000f000fu;
#else
    return __shfl_sync(FULL_MASK, 0x000f000fu, 0);
#endif
}

// pairs_a4 (project_mma.cu) with the mask in a register: the same four exact bf16 pairs.
__device__ __forceinline__ void pairs_a4_masked(u32 q, u32 mask, u32 (&p)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#ifdef TF_EMU
        p[i] = emu_bf16x2_sub128(((q >> (4 * i)) & mask) | 0x43004300u);
#else
        u32 v, r;
        asm("lop3.b32 %0, %1, %2, 0x43004300, 0xEA;" : "=r"(v) : "r"(q >> (4 * i)), "r"(mask));
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x3f803f80u), "r"(0xc300c300u));
        p[i] = r;
#endif
    }
}

// One pipeline stage of a warp, for MT tiles of 16 outputs: the codes of its 16·MT outputs for one group (output
// row r at r·16·WPL bytes), then per tile 32 words of scale (slots 0..15, output m·16 + slot) and bias (slots
// 16..31) bytes: the aligned 4-byte word that holds the output's value (a 2-byte scale shares its word with a
// neighbouring group's).
template <int WPL, int MT>
struct StreamStage {
    static constexpr int CODE_BYTES = 16 * MT * 16 * WPL;
    static constexpr int BYTES = CODE_BYTES + MT * 32 * 4;
    static constexpr int CHUNKS = MT * WPL * 16;  // 16-byte chunks of codes
    static constexpr int CPL = (CHUNKS + 31) / 32;  // chunks per lane
};

// Most warps of a streamed block: 16 when their stages fit the 48 KB of static shared memory, else 8 (the host
// applies the same rule: ops.rs stream_max_warps).
template <int WPL, int D, int MT>
__host__ __device__ constexpr int stream_warps() {
    return 16 * D * StreamStage<WPL, MT>::BYTES <= 47 * 1024 ? 16 : 8;
}

// A lane's share of the copies of its warp's groups, in order: per 16-byte chunk of codes its next source, per
// tile the next scale-or-bias byte; each `issue` copies one group and steps to the warp's next (nw groups on).
// Outputs past `out` keep a fixed valid address and copy zeros.
template <int WPL, int MT, typename S>
struct StreamCopies {
    static constexpr int CPL = StreamStage<WPL, MT>::CPL;
    const u32* src[CPL];
    int step;  // words from one of the warp's groups to its next
    const unsigned char* sb[MT];
    int sb_step;

    // Outputs past `out` copy the last output's bytes (valid addresses, no per-copy predicate): their results are
    // never written (finish_tiles), and an mma's output row depends on its own A row only.
    __device__ __forceinline__ void init(const u32* codes, const typename S::raw* scales,
                                         const typename S::raw* biases, int o0, int out, int words, int groups,
                                         int G0, int nw) {
        constexpr int GS = 32 * WPL;
        const int lane = threadIdx.x & 31;
        step = nw * (GS / 8);
#pragma unroll
        for (int k = 0; k < CPL; ++k) {
            const int c = lane + 32 * k, r = c / WPL, part = c % WPL;
            const int o = min(o0 + r, out - 1);
            src[k] = codes + (size_t)o * words + (size_t)G0 * (GS / 8) + part * 4;
        }
        sb_step = nw * (int)sizeof(typename S::raw);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const int o = min(o0 + m * 16 + (lane & 15), out - 1);
            const unsigned char* base = reinterpret_cast<const unsigned char*>(lane < 16 ? scales : biases);
            sb[m] = base + ((size_t)o * groups + G0) * sizeof(typename S::raw);
        }
    }

    // Copies the warp's next group into the stage at `stage`.
    __device__ __forceinline__ void issue(SmemAddr stage) {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int k = 0; k < CPL; ++k)
            if (lane + 32 * k < StreamStage<WPL, MT>::CHUNKS) {
                cp_async16(stage + (lane + 32 * k) * 16, src[k], true);
                src[k] += step;
            }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const unsigned char* word = reinterpret_cast<const unsigned char*>((size_t)sb[m] & ~(size_t)3);
            cp_async4(stage + StreamStage<WPL, MT>::CODE_BYTES + (m * 32 + lane) * 4, word, true);
            sb[m] += sb_step;
        }
    }
};

// The scale or bias in stage word `slot`, at byte `sub` of it.
template <typename S>
__device__ __forceinline__ float stream_param(const unsigned char* words4, int slot, u32 sub) {
    return S::get(*reinterpret_cast<const typename S::raw*>(words4 + slot * 4 + sub));
}

// MLX 4-bit codes [out, cols/8] u32, group gs = 32·WPL; a block owns MT tiles of 16 outputs (each warp computes
// all of them for its groups, so x is read once per MT tiles); D pipeline stages per warp (D − 1 in flight).
template <int NT, int WPL, typename S, int D, int MT>
__device__ __forceinline__ void project_stream_a4(int tile, const u16* __restrict__ xh, const u16* __restrict__ xl,
                                                  const float* __restrict__ xs, const u32* __restrict__ codes,
                                                  const typename S::raw* __restrict__ scales,
                                                  const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                                  int rows, int out, int cols) {
    constexpr int GS = 32 * WPL, SB = StreamStage<WPL, MT>::BYTES;
    constexpr int W = stream_warps<WPL, D, MT>();
    constexpr int PIPE = W * D * SB, RED = W * NT * 128 * 4;
    __shared__ __align__(16) unsigned char smem[PIPE > RED ? PIPE : RED];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int ob = tile * (MMA_OUT * MT), rt0 = blockIdx.y * NT;
    unsigned char* pipe = smem + warp * D * SB;
    int xrow[NT];
    // Rows past the last read the last row's x (valid addresses, no predicates in the loop): an mma's output
    // column depends on its own B column only, and finish_tiles never writes those columns.
    tile_rows<NT>(xrow, rt0, rows);
    int crow[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        if (xrow[nt] < 0) xrow[nt] = rows - 1;
#pragma unroll
        for (int c = 0; c < 2; ++c) crow[nt][c] = min((rt0 + nt) * 8 + 2 * t + c, rows - 1);
    }
    const int words = cols / 8, groups = cols / GS, chunks = cols / 32;
    const u32 mask = opaque_nibble_mask();
    // This warp's groups: warp, warp + nw, … (project_mma_a4's split), n of them. Every pointer below starts at
    // the warp's first group and steps nw groups at a time.
    const int n = warp < groups ? (groups - warp + nw - 1) / nw : 0;
    StreamCopies<WPL, MT, S> cp;
    cp.init(codes, scales, biases, ob, out, words, groups, warp, nw);
    const SmemAddr pipe_s = smem_addr(pipe);
    // Per tile, where outputs g and g + 8 find their scale and bias in their aligned words: (o·groups + G)·size
    // mod 4, from the output's part and G's (stepped with G).
    u32 orow[MT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            orow[m][h] = (u32)(((size_t)(ob + m * 16 + g + 8 * h) * groups * sizeof(typename S::raw)) & 3u);
    u32 gpart = (u32)warp * sizeof(typename S::raw);
    const u32 gpart_step = (u32)nw * sizeof(typename S::raw);
    // x (hi, lo) at this lane's first word of the group, and x's 32-column sums at the group's first.
    const u16 *xhp[NT], *xlp[NT];
    const float* xsp[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const size_t at = (size_t)xrow[nt] * cols + ((size_t)warp * (GS / 8) + t * WPL) * 8;
        xhp[nt] = xh + at;
        xlp[nt] = xl + at;
#pragma unroll
        for (int c = 0; c < 2; ++c)
            xsp[nt][c] = xs + (size_t)crow[nt][c] * chunks + (size_t)warp * WPL;
    }
    const int x_step = nw * GS, xs_step = nw * WPL;
#pragma unroll
    for (int s = 0; s < D - 1; ++s) {
        if (s < n) cp.issue(pipe_s + s * SB);
        cp_async_commit();
    }
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][nt][i] = 0.0f;
    for (int i = 0; i < n; ++i) {
        cp_async_wait<D - 2>();  // group i has landed (for this lane) ...
        __syncwarp();            // ... and for every lane; the slot of group i − 1 is free
        if (i + D - 1 < n) cp.issue(pipe_s + ((unsigned)(i + D - 1) % D) * SB);
        cp_async_commit();
        const unsigned char* st = pipe + ((unsigned)i % D) * SB;
        const u32* cw = reinterpret_cast<const u32*>(st);
        const unsigned char* sbw = st + StreamStage<WPL, MT>::CODE_BYTES;
        // x's group sums, shared by the MT tiles.
        float sx[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                sx[nt][c] = 0.0f;
#pragma unroll
                for (int k = 0; k < WPL; ++k) sx[nt][c] += xsp[nt][c][k];
                xsp[nt][c] += xs_step;
            }
        float d[MT][NT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int k = 0; k < 4; ++k) d[m][nt][k] = 0.0f;
#pragma unroll
        for (int j = 0; j < WPL; ++j) {
            // x of this word for every tile of rows, loaded once for the MT output tiles.
            uint4 h[NT], l[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                h[nt] = *reinterpret_cast<const uint4*>(xhp[nt] + j * 8);
                l[nt] = *reinterpret_cast<const uint4*>(xlp[nt] + j * 8);
            }
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                u32 pg[4], pg8[4];
                pairs_a4_masked(cw[(m * 16 + g) * 4 * WPL + t * WPL + j], mask, pg);
                pairs_a4_masked(cw[(m * 16 + g + 8) * 4 * WPL + t * WPL + j], mask, pg8);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    mma_bf16(d[m][nt], pg[0], pg8[0], pg[1], pg8[1], h[nt].x, h[nt].y);
                    mma_bf16(d[m][nt], pg[0], pg8[0], pg[1], pg8[1], l[nt].x, l[nt].y);
                    mma_bf16(d[m][nt], pg[2], pg8[2], pg[3], pg8[3], h[nt].z, h[nt].w);
                    mma_bf16(d[m][nt], pg[2], pg8[2], pg[3], pg8[3], l[nt].z, l[nt].w);
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            xhp[nt] += x_step;
            xlp[nt] += x_step;
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            // Outputs past `out` read some neighbour's scale and bias here: their results are never written.
            const u32 sg = (orow[m][0] + gpart) & 3u, sg8 = (orow[m][1] + gpart) & 3u;
            float sb[4];
            sb[0] = stream_param<S>(sbw, m * 32 + g, sg);
            sb[1] = stream_param<S>(sbw, m * 32 + 16 + g, sg);
            sb[2] = stream_param<S>(sbw, m * 32 + g + 8, sg8);
            sb[3] = stream_param<S>(sbw, m * 32 + 24 + g, sg8);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                acc[m][nt][0] = fmaf(sb[1], sx[nt][0], fmaf(sb[0], d[m][nt][0], acc[m][nt][0]));
                acc[m][nt][1] = fmaf(sb[1], sx[nt][1], fmaf(sb[0], d[m][nt][1], acc[m][nt][1]));
                acc[m][nt][2] = fmaf(sb[3], sx[nt][0], fmaf(sb[2], d[m][nt][2], acc[m][nt][2]));
                acc[m][nt][3] = fmaf(sb[3], sx[nt][1], fmaf(sb[2], d[m][nt][3], acc[m][nt][3]));
            }
        }
        gpart += gpart_step;
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with its stages before they become the reduction's scratch
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        finish_tiles<NT>(acc[m], y, rows, out, ob + m * 16, rt0, reinterpret_cast<float*>(smem));
        __syncthreads();  // the scratch is read in full before the next tile writes it
    }
}

// Each kernel projects x by one matrix, or by two of the same shape in one launch (a pair sharing x, e.g. gate and
// up): blocks from `split` on take the second (codes2 … y2) with the same tiles, so each output gets the bits of
// its own launch. One matrix: split = the grid's width.
#define STREAM_A4(NT, WPL, NAME, S, D, MT)                                                                       \
    extern "C" __global__ void __launch_bounds__(stream_warps<WPL, D, MT>() * 32)                                 \
        project_stream_a4_g##WPL##_##NAME##_nt##NT##_s##D##_m##MT(                                                \
            const u16* xh, const u16* xl, const float* xs, const u32* codes, const S::raw* scales,               \
            const S::raw* biases, float* y, const u32* codes2, const S::raw* scales2, const S::raw* biases2,    \
            float* y2, int split, int rows, int out, int cols) {                                                 \
        const bool second = (int)blockIdx.x >= split;                                                            \
        project_stream_a4<NT, WPL, S, D, MT>(second ? blockIdx.x - split : blockIdx.x, xh, xl, xs,               \
                                             second ? codes2 : codes, second ? scales2 : scales,                 \
                                             second ? biases2 : biases, second ? y2 : y, rows, out, cols);        \
    }
#define STREAM_A4_NT(WPL, NAME, S, D, MT) \
    STREAM_A4(1, WPL, NAME, S, D, MT) STREAM_A4(2, WPL, NAME, S, D, MT) STREAM_A4(4, WPL, NAME, S, D, MT)
#define STREAM_A4_ALL(WPL, D, MT) \
    STREAM_A4_NT(WPL, f32, F32T, D, MT) STREAM_A4_NT(WPL, f16, F16T, D, MT) STREAM_A4_NT(WPL, bf16, BF16T, D, MT)
// Shared memory per block: 8 or 16 warps × D stages × MT·(256·WPL + 128) bytes, within 48 KB of static shared memory.
STREAM_A4_ALL(1, 4, 1)
STREAM_A4_ALL(2, 4, 1)
STREAM_A4_ALL(4, 4, 1)
STREAM_A4_ALL(1, 8, 1)
STREAM_A4_ALL(2, 8, 1)
STREAM_A4_ALL(1, 4, 2)
STREAM_A4_ALL(2, 4, 2)
