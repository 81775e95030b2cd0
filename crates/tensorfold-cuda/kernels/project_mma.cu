// project_mma.cu: y = x Wᵀ on tensor cores (mma.sync m16n8k16 bf16, f32 accumulate) for bf16 weights and MLX
// 4-bit codes, one kernel family for 1..N rows. Decode pays for a padded 8-row tile, which is free while the
// weights stream from memory; a 16-row round reads the weights once as a 1-row round does.
//
// Precision: x enters as bf16 hi + lo (prepare_x), so each product keeps about 16 bits of x; bf16 weights and
// 4-bit codes are exact in bf16; the group's scale and bias are applied in f32 after its mma sum
// (y = Σ_g s·(q·x)_g + b·(Σx)_g, with Σx summed in f32 by prepare_x).
//
// Row invariance: an mma output element depends only on its own A row (output feature) and B column (x row); a
// row always sits in column row % 8 of tile row / 8; the warps of a block split the columns into groups by the
// shape alone and meet in warp order; the choice of NT (tiles per block) only repeats the same per-tile code.
// So a row's bits never depend on the other rows of the call.
//
// Column order inside an mma: the k slots may be any permutation of a group's columns as long as A and B agree.
// Lane (g, t) of a quad holds, for the word (8 columns c0..c7) it loads, the pairs P0 = (c0,c4), P1 = (c1,c5),
// P2 = (c2,c6), P3 = (c3,c7): the 4-bit codes give these pairs with one mask each, and prepare_x stores x in this
// order so one 16-byte load gives all four.

#define MMA_OUT 16   // output features per block (the mma's M)
#define MMA_MAXW 16  // most warps per block

// d += a·b for one m16n8k16 tile (a: 16 outputs × 16 k, b: 16 k × 8 rows), f32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
#ifdef TF_EMU
    emu_mma_bf16(d, a0, a1, a2, a3, b0, b1);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// Two 4-bit codes (at bits 0..3 and 16..19) to the bf16 pair (q0, q1), exactly: 128 + q is a bf16 with an ulp
// of 1, and one packed fma takes the 128 off.
__device__ __forceinline__ u32 codes_to_bf16x2(u32 p) {
    const u32 v = p | 0x43004300u;
#ifdef TF_EMU
    return emu_bf16x2_sub128(v);
#else
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x3f803f80u), "r"(0xc300c300u));
    return r;
#endif
}

// f32 → bf16 bits, round to nearest even (NaN stays NaN).
__device__ __forceinline__ u16 f32_to_bf16_rn(float f) {
    const u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Element i (of the flattened [rows, cols], cols % 32 == 0) of x's tensor-core form: hi and lo bf16 in the pair
// order of each 8-column word, and the f32 sum of its 32 columns (one butterfly). A whole warp calls it on 32
// consecutive elements, lane = i % 32, so every producer (prepare_x, rms_norm, add_rms_norm, swiglu) gives the same
// bits for the same values.
__device__ __forceinline__ void prepare_store(size_t i, float v, u16* __restrict__ xh, u16* __restrict__ xl,
                                              float* __restrict__ xs) {
    const float s = warp_sum(v);
    const int e = (int)(i & 7);
    const size_t dst = (i & ~(size_t)7) + (e < 4 ? 2 * e : 2 * (e - 4) + 1);
    const u16 h = f32_to_bf16_rn(v);
    xh[dst] = h;
    xl[dst] = f32_to_bf16_rn(v - bf16_to_f32(h));
    if ((threadIdx.x & 31) == 0) xs[i / 32] = s;
}

// x [rows, cols] f32 → its tensor-core form (prepare_store), one thread per element; cols % 32 == 0, so a warp is
// wholly in range or wholly out.
extern "C" __global__ void prepare_x(const float* __restrict__ x, u16* __restrict__ xh, u16* __restrict__ xl,
                                     float* __restrict__ xs, int rows, int cols) {
    kernel_entry();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * cols) return;
    prepare_store(i, x[i], xh, xl, xs);
}

// The four pairs of one word of 4-bit codes.
__device__ __forceinline__ void pairs_a4(u32 q, u32 (&p)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = codes_to_bf16x2((q >> (4 * i)) & 0x000f000fu);
}

// The four pairs of one word of bf16 weights (natural pairs (c0,c1), (c2,c3), … in u.x … u.w).
__device__ __forceinline__ void pairs_bf16(uint4 u, u32 (&p)[4]) {
    p[0] = __byte_perm(u.x, u.z, 0x5410);
    p[1] = __byte_perm(u.x, u.z, 0x7632);
    p[2] = __byte_perm(u.y, u.w, 0x5410);
    p[3] = __byte_perm(u.y, u.w, 0x7632);
}

// One word (8 columns) of every tile: two k-steps, hi then lo, for A pairs `pg` (output g) and `pg8` (g + 8).
template <int NT>
__device__ __forceinline__ void mma_word(float (&d)[NT][4], const u32 (&pg)[4], const u32 (&pg8)[4],
                                         const u16* __restrict__ xh, const u16* __restrict__ xl,
                                         const int (&xrow)[NT], size_t col, int cols) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        uint4 h = {0u, 0u, 0u, 0u}, l = {0u, 0u, 0u, 0u};
        if (xrow[nt] >= 0) {
            h = *reinterpret_cast<const uint4*>(xh + (size_t)xrow[nt] * cols + col);
            l = *reinterpret_cast<const uint4*>(xl + (size_t)xrow[nt] * cols + col);
        }
        mma_bf16(d[nt], pg[0], pg8[0], pg[1], pg8[1], h.x, h.y);
        mma_bf16(d[nt], pg[0], pg8[0], pg[1], pg8[1], l.x, l.y);
        mma_bf16(d[nt], pg[2], pg8[2], pg[3], pg8[3], h.z, h.w);
        mma_bf16(d[nt], pg[2], pg8[2], pg[3], pg8[3], l.z, l.w);
    }
}

// Adds the warps' partial tiles in warp order and writes y (lane layout of the mma's C fragment).
// `red` is shared scratch of (warps · NT · 128) floats.
template <int NT>
__device__ __forceinline__ void finish_tiles(float (&acc)[NT][4], float* __restrict__ y, int rows, int out, int o0,
                                             int rt0, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[(warp * NT + nt) * 128 + lane * 4 + i] = acc[nt][i];
    __syncthreads();
    for (int e = threadIdx.x; e < NT * 128; e += blockDim.x) {
        float v = red[e];
        for (int w = 1; w < nw; ++w) v += red[w * NT * 128 + e];
        const int nt = e / 128, l = (e % 128) / 4, i = e % 4;
        const int m = (l >> 2) + (i >= 2 ? 8 : 0), n = 2 * (l & 3) + (i & 1);
        const int row = (rt0 + nt) * 8 + n;
        if (row < rows && o0 + m < out) y[(size_t)row * out + o0 + m] = v;
    }
}

// The x rows this lane feeds as B (column g of each tile), or -1 past the last row.
template <int NT>
__device__ __forceinline__ void tile_rows(int (&xrow)[NT], int rt0, int rows) {
    const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int r = (rt0 + nt) * 8 + g;
        xrow[nt] = r < rows ? r : -1;
    }
}

// bf16 weights [out, cols], cols % 64 == 0: the warps take 64-column groups (two words per lane) in turn.
template <int NT>
__device__ __forceinline__ void project_mma_bf16(const u16* __restrict__ xh, const u16* __restrict__ xl,
                                                 const u16* __restrict__ w, float* __restrict__ y, int rows,
                                                 int out, int cols) {
    constexpr int U = 1;  // groups loaded before computing (more was slower on the H200: BENCHMARKS.md §7)
    __shared__ float red[MMA_MAXW * NT * 128];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int o0 = blockIdx.x * MMA_OUT, rt0 = blockIdx.y * NT;
    int xrow[NT];
    tile_rows<NT>(xrow, rt0, rows);
    const bool has_g = o0 + g < out, has_g8 = o0 + g + 8 < out;
    const u16* wg = w + (size_t)(has_g ? o0 + g : 0) * cols;
    const u16* wg8 = w + (size_t)(has_g8 ? o0 + g + 8 : 0) * cols;
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
    const int groups = cols / 64;
    const uint4 zero = {0u, 0u, 0u, 0u};
    for (int G0 = warp; G0 < groups; G0 += U * nw) {
        uint4 ug[U][2], ug8[U][2];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int G = G0 + u * nw;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const size_t col = (size_t)G * 64 + (t * 2 + j) * 8;
                ug[u][j] = G < groups && has_g ? *reinterpret_cast<const uint4*>(wg + col) : zero;
                ug8[u][j] = G < groups && has_g8 ? *reinterpret_cast<const uint4*>(wg8 + col) : zero;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int G = G0 + u * nw;
            if (G >= groups) break;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                u32 pg[4], pg8[4];
                pairs_bf16(ug[u][j], pg);
                pairs_bf16(ug8[u][j], pg8);
                mma_word<NT>(acc, pg, pg8, xh, xl, xrow, (size_t)G * 64 + (t * 2 + j) * 8, cols);
            }
        }
    }
    finish_tiles<NT>(acc, y, rows, out, o0, rt0, red);
}

// A lane's WPL consecutive words of one packed row, in one load.
template <int WPL>
__device__ __forceinline__ void load_words(const u32* __restrict__ p, u32 (&q)[WPL]) {
    if constexpr (WPL == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        q[0] = v.x; q[1] = v.y; q[2] = v.z; q[3] = v.w;
    } else if constexpr (WPL == 2) {
        const uint2 v = *reinterpret_cast<const uint2*>(p);
        q[0] = v.x; q[1] = v.y;
    } else {
        q[0] = *p;
    }
}

// MLX 4-bit codes with per-group scales and biases, group gs = 32·WPL, tile-major (common.cu a4_tile_code): the
// warps take groups in turn; lane t holds WPL words (gs/4 columns) of each group, so each mma stays inside one group.
template <int NT, int WPL, typename S>
__device__ __forceinline__ void project_mma_a4(const u16* __restrict__ xh, const u16* __restrict__ xl,
                                               const float* __restrict__ xs, const u32* __restrict__ codes,
                                               const typename S::raw* __restrict__ scales,
                                               const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                               int rows, int out, int cols) {
    constexpr int GS = 32 * WPL, U = 1;  // groups loaded before computing (more was slower: BENCHMARKS.md §7)
    __shared__ float red[MMA_MAXW * NT * 128];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int o0 = blockIdx.x * MMA_OUT, rt0 = blockIdx.y * NT;
    int xrow[NT];
    tile_rows<NT>(xrow, rt0, rows);
    // The C fragment's rows: x rows 2t and 2t + 1 of each tile, for the group sums of x.
    int crow[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int r = (rt0 + nt) * 8 + 2 * t + c;
            crow[nt][c] = r < rows ? r : -1;
        }
    const bool has_g = o0 + g < out, has_g8 = o0 + g + 8 < out;
    const int groups = cols / GS, chunks = cols / 32;
    const int og = has_g ? o0 + g : 0, og8 = has_g8 ? o0 + g + 8 : 0;
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
    for (int G0 = warp; G0 < groups; G0 += U * nw) {
        u32 qg[U][WPL], qg8[U][WPL];
        float sb[U][4];  // scale and bias of outputs g and g + 8
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int G = G0 + u * nw;
            const size_t w0 = (size_t)G * (GS / 8) + t * WPL;
            if (G < groups && has_g) {
                load_words<WPL>(codes + a4_tile_code(og, G, groups, GS / 2) / 4 + t * WPL, qg[u]);
                sb[u][0] = S::get(scales[a4_tile_param(og, G, groups)]);
                sb[u][1] = S::get(biases[a4_tile_param(og, G, groups)]);
            } else {
#pragma unroll
                for (int j = 0; j < WPL; ++j) qg[u][j] = 0u;
                sb[u][0] = sb[u][1] = 0.0f;
            }
            if (G < groups && has_g8) {
                load_words<WPL>(codes + a4_tile_code(og8, G, groups, GS / 2) / 4 + t * WPL, qg8[u]);
                sb[u][2] = S::get(scales[a4_tile_param(og8, G, groups)]);
                sb[u][3] = S::get(biases[a4_tile_param(og8, G, groups)]);
            } else {
#pragma unroll
                for (int j = 0; j < WPL; ++j) qg8[u][j] = 0u;
                sb[u][2] = sb[u][3] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int G = G0 + u * nw;
            if (G >= groups) break;
            const size_t w0 = (size_t)G * (GS / 8) + t * WPL;
            float d[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) d[nt][i] = 0.0f;
#pragma unroll
            for (int j = 0; j < WPL; ++j) {
                u32 pg[4], pg8[4];
                pairs_a4(qg[u][j], pg);
                pairs_a4(qg8[u][j], pg8);
                mma_word<NT>(d, pg, pg8, xh, xl, xrow, (w0 + j) * 8, cols);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                float sx[2];
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    sx[c] = 0.0f;
                    if (crow[nt][c] >= 0) {
#pragma unroll
                        for (int k = 0; k < WPL; ++k) sx[c] += xs[(size_t)crow[nt][c] * chunks + G * WPL + k];
                    }
                }
                acc[nt][0] = fmaf(sb[u][1], sx[0], fmaf(sb[u][0], d[nt][0], acc[nt][0]));
                acc[nt][1] = fmaf(sb[u][1], sx[1], fmaf(sb[u][0], d[nt][1], acc[nt][1]));
                acc[nt][2] = fmaf(sb[u][3], sx[0], fmaf(sb[u][2], d[nt][2], acc[nt][2]));
                acc[nt][3] = fmaf(sb[u][3], sx[1], fmaf(sb[u][2], d[nt][3], acc[nt][3]));
            }
        }
    }
    finish_tiles<NT>(acc, y, rows, out, o0, rt0, red);
}

#define MMA_BF16(NT)                                                                                             \
    extern "C" __global__ void __launch_bounds__(MMA_MAXW * 32)                                                   \
        project_mma_bf16_nt##NT(const u16* xh, const u16* xl, const u16* w, float* y, int rows, int out,          \
                                int cols) {                                                                       \
        kernel_entry();                                                                                           \
        project_mma_bf16<NT>(xh, xl, w, y, rows, out, cols);                                                      \
    }
MMA_BF16(1)
MMA_BF16(2)
MMA_BF16(4)

#define MMA_A4(NT, WPL, NAME, S)                                                                                 \
    extern "C" __global__ void __launch_bounds__(MMA_MAXW * 32)                                                   \
        project_mma_a4_g##WPL##_##NAME##_nt##NT(const u16* xh, const u16* xl, const float* xs, const u32* codes,  \
                                                const S::raw* scales, const S::raw* biases, float* y, int rows,  \
                                                int out, int cols) {                                             \
        kernel_entry();                                                                                          \
        project_mma_a4<NT, WPL, S>(xh, xl, xs, codes, scales, biases, y, rows, out, cols);                        \
    }
#define MMA_A4_NT(WPL, NAME, S) MMA_A4(1, WPL, NAME, S) MMA_A4(2, WPL, NAME, S) MMA_A4(4, WPL, NAME, S)
#define MMA_A4_ALL(WPL) MMA_A4_NT(WPL, f32, F32T) MMA_A4_NT(WPL, f16, F16T) MMA_A4_NT(WPL, bf16, BF16T)
MMA_A4_ALL(1)
MMA_A4_ALL(2)
MMA_A4_ALL(4)
