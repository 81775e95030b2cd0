// project_mma.cu: y = x Wᵀ on tensor cores (mma.sync m16n8k16 bf16, f32 accumulate) for bf16 weights and MLX
// 4-bit codes, one kernel family for 1..N rows. Decode pays for a padded 4-row tile, which costs little while the
// weights stream from memory; a 16-row round reads the weights once as a 1-row round does.
//
// Precision: x enters as bf16 hi + lo (prepare_x), so each product keeps about 16 bits of x; bf16 weights and
// 4-bit codes are exact in bf16; the group's scale and bias are applied in f32 after its mma sum
// (y = Σ_g s·((q − 8)·x)_g + (b + 8s)·(Σx)_g, with Σx summed in f32 by prepare_x). The codes enter centred,
// as q − 8: a sum of q·x over codes 0..15 is dominated by 7.5·Σx, which the bias then cancels, so the tensor
// cores' f32 accumulation lost bits to a large intermediate (tiny-mlx-4bit at 1.00e-3 from float64 with the
// codes as 0..15 and hi and lo in separate sums, call 46).
//
// Hi and lo are two B columns: an n-tile of 8 columns holds 4 rows, row r's hi in column 2(r % 4) and its lo in
// column 2(r % 4) + 1, so one mma does the work of both halves (the tensor pipe was a bound of 1-row decode: the
// 27B decoded 13% faster with the lo mmas left out, call 45). The C fragment then gives each lane the hi and the
// lo sum of one row side by side, and the row's value is hi + lo in f32.
//
// Row invariance: an mma output element depends only on its own A row (output feature) and B column (x row and
// half); row r always sits in columns 2(r % 4), 2(r % 4) + 1 of n-tile r / 4; the warps of a block split the
// columns into groups by the shape alone and meet in warp order; the choice of NT (tiles per block) only repeats
// the same per-tile code. So a row's bits never depend on the other rows of the call.
//
// Column order inside an mma: the k slots may be any permutation of a group's columns as long as A and B agree.
// Lane (g, t) of a quad holds, for the word (8 columns c0..c7) it loads, the pairs P0 = (c0,c4), P1 = (c1,c5),
// P2 = (c2,c6), P3 = (c3,c7): the 4-bit codes give these pairs with one mask each, and prepare_x stores x in this
// order so one 16-byte load gives all four.

// The wgmma kernels (rounds of 5 to 64 rows, prompt chunks) start each 4-bit group's sum with no C (scale-d off,
// D = A·B), where the mma.sync kernels add a C of +0. Adding +0 leaves every nonzero sum as it is, and the tensor
// cores give a zero sum as +0 whatever the signs of its products and of C (call 161, an H100: rows built so that
// a −0 would reach the outputs, backend-ops' zero-sign rows, gave +0 on every path), so the bits are the same. It
// saves the round kernels zeroing their accumulators each group: 375 → 331 SASS instructions a group in the
// 16-row kernel, and 16-row 27B MLX4 rounds 5% faster, 2k prefills 7% (BENCHMARKS.md §7, calls 161-163).
// TF_ZEROED_GROUPS (TENSORFOLD_CUDA_DEFINES) zeroes them through an opaque +0 again, for same-run comparisons.
#ifdef TF_ZEROED_GROUPS
#define FRESH_GROUPS false
#else
#define FRESH_GROUPS true
#endif

#define MMA_OUT 16   // output features per block (the mma's M)
#define MMA_MAXW 16  // most warps per block
// Whether project_mma_bf16<NT> loads its first weights before its wait, and so calls kernel_entry itself: the
// 1-row-tile build only. Loading early, the 2-row-tile build needs more than 64 registers (one 16-warp block an SM)
// or, held to two blocks an SM, still runs 8-row rounds slower (BENCHMARKS.md §7, calls 176 and 178).
template <int NT>
__device__ constexpr bool mma_bf16_early() {
    return NT == 1;
}

// d += a·b for one m16n8k16 tile (a: 16 outputs × 16 k, b: 16 k × 8 columns), f32 accumulate.
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

// The bf16 pair (128 + q0, 128 + q1) of two 4-bit codes to the centred pair (q0 − 8, q1 − 8), exactly: 128 + q is
// a bf16 with an ulp of 1, and one packed fma takes 136 off (every 4-bit kernel centres its codes here).
__device__ __forceinline__ u32 centre_codes(u32 v) {
#ifdef TF_EMU
    return emu_bf16x2_sub136(v);
#else
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x3f803f80u), "r"(0xc308c308u));
    return r;
#endif
}

// Two 4-bit codes (at bits 0..3 and 16..19) to the centred bf16 pair (q0 − 8, q1 − 8).
__device__ __forceinline__ u32 codes_to_bf16x2(u32 p) { return centre_codes(p | 0x43004300u); }

// A group's bias for centred codes: b + 8s, in f32 (the same fma on every path).
__device__ __forceinline__ float centred_bias(float s, float b) { return fmaf(8.0f, s, b); }

// x's wgmma B tiles (project_wgmma.cu, project_wgmma_gemm.cu): one 4,096-byte tile a group of 64 columns and block
// of 16 rows, row r's hi in B column n = 8·((r % 16) / 4) + 2·(r % 4) and its lo in column n + 1 (TILE_ROWS rows
// an n-tile, as the mma.sync kernels' columns); the tiles of a row block's groups side by side, then the next
// row block's.
#define WG_STEP 256    // bytes between k16 steps in the B tile (2 core matrices of 128 bytes along K)
#define WG_TILE 4096   // the B tile of one group: 4 column groups × 8 core matrices × 128 bytes

// Byte offset in the B tile of column n (0..31) at k index kk (0..63, 16 per step): core matrices of 8 columns ×
// 8 k (16 bytes a column), K-adjacent ones 128 bytes apart (LBO), column-adjacent 1,024 (SBO): the layout the probe
// verified.
__device__ __forceinline__ int wg_b_at(int n, int kk) {
    return (((n >> 3) * 8 + (kk >> 3)) * 128) + (n & 7) * 16 + (kk & 7) * 2;
}

// Byte offset in its group's B tile of row r's hi at place P (0..63) of the group in x's pair order: the k slot
// mma.sync's lanes would feed it from (slot 2t (+1) of k16 step (j, h) is word 2t + j's pair 2h, slot 2t + 8 (+9)
// its pair 2h + 1).
__device__ __forceinline__ int wg_tile_at(int r, int P) {
    const int w = P >> 3, tt = w >> 1, j = w & 1, h = (P >> 2) & 1, p2 = (P >> 1) & 1;
    return wg_b_at(8 * (r >> 2) + 2 * (r & 3), 16 * (2 * j + h) + 2 * (4 * p2 + tt) + (P & 1));
}

// f32 → bf16 bits, round to nearest even (NaN stays NaN, its sign and top payload bits kept, quiet).
__device__ __forceinline__ u16 f32_to_bf16_rn(float f) {
    const u32 u = __float_as_uint(f);
#ifdef TF_EMU
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    return (u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#else
    // The hardware's rounding (one F2FP) is the integer one above for every non-NaN (ties to even, subnormals
    // and overflow to infinity included); only its NaN differs (canonical), so NaNs keep the integer form and
    // the bits stay those of the CPU emulator and of every earlier build.
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return (u & 0x7fffffffu) > 0x7f800000u ? (u16)((u >> 16) | 0x40u) : h;
#endif
}

// Element i = row·cols + c (of the flattened [rows, cols], cols % 32 == 0) of x's tensor-core form: hi and lo
// bf16 in the pair order of each 8-column word, and the f32 sum of its 32 columns (one butterfly). A whole warp
// calls it on 32 consecutive elements, lane = i % 32, so every producer (prepare_x, rms_norm, add_rms_norm, swiglu,
// dn_norm) gives the same bits for the same values. When bt is not null (calls a wgmma kernel takes: rounds of 5
// to 32 rows, prompt chunks of bf16 and 4-bit g64 weights; cols % 64 == 0), hi and lo also go to the element's
// slots in x's wgmma B tiles (wg_tile_at): no launch of its own. The callers pass row and c, which they know: the
// division that would find them costs more than the rest of the store (a norm block of one row is issue-bound).
__device__ __forceinline__ void prepare_store_at(size_t i, int row, int c, float v, u16* __restrict__ xh,
                                                 u16* __restrict__ xl, float* __restrict__ xs,
                                                 u16* __restrict__ bt, int cols) {
#ifdef TF_X_BF16
    // A measurement switch, off by default: every projection's input rounded to bf16 here, its one producer, as
    // bf16 engines feed their matmuls (lo is then +0). It measures what closeness to float64 the hi + lo form buys.
    v = bf16_to_f32(f32_to_bf16_rn(v));
#endif
    const float s = warp_sum(v);
    const int e = c & 7;  // i & 7, as cols % 32 == 0
    const int pe = e < 4 ? 2 * e : 2 * (e - 4) + 1;  // the element's place in its word's pair order
    const size_t dst = i - e + pe;
    const u16 h = f32_to_bf16_rn(v);
    const u16 l = f32_to_bf16_rn(v - bf16_to_f32(h));
    xh[dst] = h;
    xl[dst] = l;
    if ((threadIdx.x & 31) == 0) xs[i / 32] = s;
    if (bt != nullptr) {
        // Tiles of 16 rows, row block major: tile (row / 16, group) at (row / 16 · groups + group) · WG_TILE.
        unsigned char* tile =
            reinterpret_cast<unsigned char*>(bt) + ((size_t)(row >> 4) * (cols >> 6) + (c >> 6)) * WG_TILE;
        const int at = wg_tile_at(row & 15, (c & 56) + pe);
        *reinterpret_cast<u16*>(tile + at) = h;
        *reinterpret_cast<u16*>(tile + at + 16) = l;  // lo is the next B column: 16 bytes on (wg_b_at)
    }
}

// prepare_store_at for a caller that knows only i.
__device__ __forceinline__ void prepare_store(size_t i, float v, u16* __restrict__ xh, u16* __restrict__ xl,
                                              float* __restrict__ xs, u16* __restrict__ bt, int cols) {
    prepare_store_at(i, (int)(i / (size_t)cols), (int)(i % (size_t)cols), v, xh, xl, xs, bt, cols);
}

// x [rows, cols] f32 → its tensor-core form (prepare_store), one thread per element; cols % 32 == 0, so a warp is
// wholly in range or wholly out.
extern "C" __global__ void prepare_x(const float* __restrict__ x, u16* __restrict__ xh, u16* __restrict__ xl,
                                     float* __restrict__ xs, u16* __restrict__ bt, int rows, int cols) {
    kernel_entry();
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)rows * cols) return;
    prepare_store(i, x[i], xh, xl, xs, bt, cols);
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

#define TILE_ROWS 4  // x rows per n-tile (each takes two of its 8 columns: hi and lo)

// The half of x this lane feeds as B: column g of an n-tile is hi for even g, lo for odd g.
__device__ __forceinline__ const u16* lane_half(const u16* xh, const u16* xl) {
    return ((threadIdx.x >> 2) & 1) ? xl : xh;
}

// One word (8 columns) of every tile: two k-steps for A pairs `pg` (output g) and `pg8` (g + 8), with x's half
// `xp` (lane_half) of each tile's row.
template <int NT>
__device__ __forceinline__ void mma_word(float (&d)[NT][4], const u32 (&pg)[4], const u32 (&pg8)[4],
                                         const u16* __restrict__ xp, const int (&xrow)[NT], size_t col, int cols) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        uint4 b = {0u, 0u, 0u, 0u};
        if (xrow[nt] >= 0) b = *reinterpret_cast<const uint4*>(xp + (size_t)xrow[nt] * cols + col);
        mma_bf16(d[nt], pg[0], pg8[0], pg[1], pg8[1], b.x, b.y);
        mma_bf16(d[nt], pg[2], pg8[2], pg[3], pg8[3], b.z, b.w);
    }
}

// A C fragment's hi and lo sums made one: hi + lo of row t for output g, and for output g + 8.
struct HiLo {
    float g, g8;
};
__device__ __forceinline__ HiLo hi_plus_lo(const float (&c)[4]) { return HiLo{c[0] + c[1], c[2] + c[3]}; }

// Adds the warps' partial sums in warp order and writes y. Lane (g, t) holds, per tile, outputs o0 + g and
// o0 + g + 8 of the tile's row t. `red` is shared scratch of (warps · NT · 64) floats.
template <int NT>
__device__ __forceinline__ void finish_tiles(float (&acc)[NT][2], float* __restrict__ y, int rows, int out, int o0,
                                             int rt0, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 2; ++i) red[(warp * NT + nt) * 64 + lane * 2 + i] = acc[nt][i];
    __syncthreads();
    for (int e = threadIdx.x; e < NT * 64; e += blockDim.x) {
        float v = red[e];
        for (int w = 1; w < nw; ++w) v += red[w * NT * 64 + e];
        const int nt = e / 64, l = (e % 64) / 2, i = e % 2;
        const int m = (l >> 2) + 8 * i, row = (rt0 + nt) * TILE_ROWS + (l & 3);
        if (row < rows && o0 + m < out) y[(size_t)row * out + o0 + m] = v;
    }
}

// A tensor-core launch's blocks are (row block, output tile) with the row blocks of one tile side by side in launch
// order (blockIdx.x), so they read that tile's weights together: one trip to memory, the others served by L2 (with
// the tiles outer, each row block streamed the whole matrix again). TF_ROWS_APART restores that order for same-run
// comparisons (project.rs rows_apart); every block computes the same either way.
#ifdef TF_ROWS_APART
__device__ __forceinline__ int tile_block() { return blockIdx.x; }
__device__ __forceinline__ int row_block() { return blockIdx.y; }
#else
__device__ __forceinline__ int tile_block() { return blockIdx.y; }
__device__ __forceinline__ int row_block() { return blockIdx.x; }
#endif

// The x rows this lane feeds as B (row g / 2 of each tile), or -1 past the last row.
template <int NT>
__device__ __forceinline__ void tile_rows(int (&xrow)[NT], int rt0, int rows) {
    const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int r = (rt0 + nt) * TILE_ROWS + (g >> 1);
        xrow[nt] = r < rows ? r : -1;
    }
}

// A lane's 16 bytes at column col of the warp's two weight rows g and g + 8, each +0 where it is not `in`.
__device__ __forceinline__ void load_word_pair(uint4& u, uint4& u8, const u16* __restrict__ wg,
                                               const u16* __restrict__ wg8, size_t col, bool in_g, bool in_g8) {
    const uint4 zero = {0u, 0u, 0u, 0u};
    u = in_g ? *reinterpret_cast<const uint4*>(wg + col) : zero;
    u8 = in_g8 ? *reinterpret_cast<const uint4*>(wg8 + col) : zero;
}

// bf16 weights [out, cols], cols % 64 == 0: the warps take 64-column groups (two words per lane) in turn.
template <int NT>
__device__ __forceinline__ void project_mma_bf16(int tile, const u16* __restrict__ xh, const u16* __restrict__ xl,
                                                 const u16* __restrict__ w, float* __restrict__ y, int rows,
                                                 int out, int cols) {
    constexpr int U = 1;  // groups loaded before computing (more was slower on the H200: BENCHMARKS.md §7)
    __shared__ float red[MMA_MAXW * NT * 64];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int o0 = tile * MMA_OUT, rt0 = row_block() * NT;
    int xrow[NT];
    tile_rows<NT>(xrow, rt0, rows);
    const u16* xp = lane_half(xh, xl);
    const bool has_g = o0 + g < out, has_g8 = o0 + g + 8 < out;
    const u16* wg = w + (size_t)(has_g ? o0 + g : 0) * cols;
    const u16* wg8 = w + (size_t)(has_g8 ? o0 + g + 8 : 0) * cols;
    float c[NT][4];  // the warp's C fragments over all its groups: hi and lo sums side by side
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) c[nt][i] = 0.0f;
    const int groups = cols / 64;
    // Rounds of 1 to 4 rows (NT 1): the warp's first group's weights are loaded before the previous kernel is done
    // (weights are never written), everything else after the wait: project_stream.cu's early copies, for the bf16
    // decode kernel. Which builds do so: mma_bf16_early.
    constexpr bool EARLY = mma_bf16_early<NT>();
    static_assert(U == 1, "one group loaded early");
    uint4 first[2], first8[2];
    if constexpr (EARLY) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const size_t col = (size_t)warp * 64 + (t * 2 + j) * 8;
            load_word_pair(first[j], first8[j], wg, wg8, col, warp < groups && has_g, warp < groups && has_g8);
        }
        kernel_entry();
    }
    for (int G0 = warp; G0 < groups; G0 += U * nw) {
        uint4 ug[U][2], ug8[U][2];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int G = G0 + u * nw;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const size_t col = (size_t)G * 64 + (t * 2 + j) * 8;
                if (EARLY && G == warp) {
                    ug[u][j] = first[j];
                    ug8[u][j] = first8[j];
                    continue;
                }
                load_word_pair(ug[u][j], ug8[u][j], wg, wg8, col, G < groups && has_g, G < groups && has_g8);
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
                mma_word<NT>(c, pg, pg8, xp, xrow, (size_t)G * 64 + (t * 2 + j) * 8, cols);
            }
        }
    }
    float acc[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const HiLo v = hi_plus_lo(c[nt]);
        acc[nt][0] = v.g;
        acc[nt][1] = v.g8;
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
    __shared__ float red[MMA_MAXW * NT * 64];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int o0 = tile_block() * MMA_OUT, rt0 = row_block() * NT;
    int xrow[NT];
    tile_rows<NT>(xrow, rt0, rows);
    const u16* xp = lane_half(xh, xl);
    // The C fragment's row: x row t of each tile, for the group sums of x.
    int crow[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int r = (rt0 + nt) * TILE_ROWS + t;
        crow[nt] = r < rows ? r : -1;
    }
    const bool has_g = o0 + g < out, has_g8 = o0 + g + 8 < out;
    const int groups = cols / GS, chunks = cols / 32;
    const int og = has_g ? o0 + g : 0, og8 = has_g8 ? o0 + g + 8 : 0;
    float acc[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = 0.0f;
    for (int G0 = warp; G0 < groups; G0 += U * nw) {
        u32 qg[U][WPL], qg8[U][WPL];
        float sb[U][4];  // scale and bias of outputs g and g + 8
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int G = G0 + u * nw;
            if (G < groups && has_g) {
                load_words<WPL>(codes + a4_tile_code(og, G, groups, GS / 2) / 4 + t * WPL, qg[u]);
                sb[u][0] = S::get(scales[a4_tile_param(og, G, groups)]);
                sb[u][1] = centred_bias(sb[u][0], S::get(biases[a4_tile_param(og, G, groups)]));
            } else {
#pragma unroll
                for (int j = 0; j < WPL; ++j) qg[u][j] = 0u;
                sb[u][0] = sb[u][1] = 0.0f;
            }
            if (G < groups && has_g8) {
                load_words<WPL>(codes + a4_tile_code(og8, G, groups, GS / 2) / 4 + t * WPL, qg8[u]);
                sb[u][2] = S::get(scales[a4_tile_param(og8, G, groups)]);
                sb[u][3] = centred_bias(sb[u][2], S::get(biases[a4_tile_param(og8, G, groups)]));
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
                mma_word<NT>(d, pg, pg8, xp, xrow, (w0 + j) * 8, cols);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                float sx = 0.0f;
                if (crow[nt] >= 0) {
#pragma unroll
                    for (int k = 0; k < WPL; ++k) sx += xs[(size_t)crow[nt] * chunks + G * WPL + k];
                }
                const HiLo v = hi_plus_lo(d[nt]);
                acc[nt][0] = fmaf(sb[u][1], sx, fmaf(sb[u][0], v.g, acc[nt][0]));
                acc[nt][1] = fmaf(sb[u][3], sx, fmaf(sb[u][2], v.g8, acc[nt][1]));
            }
        }
    }
    finish_tiles<NT>(acc, y, rows, out, o0, rt0, red);
}

// Launches of several matrices sharing x (project.rs project_many): which of up to four a block takes, given
// the tiles (tile_block) where the second, third and fourth start (ascending; INT_MAX when absent), and that
// matrix's value of a per-matrix argument.
__device__ __forceinline__ int job_of_block(int b, int start1, int start2, int start3) {
    return (b >= start1) + (b >= start2) + (b >= start3);
}
__device__ __forceinline__ int job_of(int start1, int start2, int start3) {
    return job_of_block(tile_block(), start1, start2, start3);
}
template <typename T>
__device__ __forceinline__ T job_pick(int j, T a, T b, T c, T d) {
    return j == 0 ? a : j == 1 ? b : j == 2 ? c : d;
}
// One matrix's arguments: 4-bit codes, scales, biases, output and output count; bf16 weights, output and count.
#define A4_JOB(S, J) const u32 *codes##J, const S::raw *scales##J, const S::raw *biases##J, float *y##J, int out##J
#define BF16_JOB(J) const u16 *w##J, float *y##J, int out##J

#define MMA_BF16(NT)                                                                                             \
    extern "C" __global__ void __launch_bounds__(MMA_MAXW * 32)                                                   \
        project_mma_bf16_nt##NT(const u16* xh, const u16* xl, BF16_JOB(0), BF16_JOB(1), int start1, BF16_JOB(2),  \
                                int start2, BF16_JOB(3), int start3, int rows, int cols, L2_AHEAD_ARGS) {         \
        entry_after_weights(); /* the wait: in project_mma_bf16 if it loads early, else the next line */          \
        if (!mma_bf16_early<NT>()) kernel_entry();                                                                \
        const int j = job_of(start1, start2, start3);                                                             \
        project_mma_bf16<NT>(tile_block() - job_pick(j, 0, start1, start2, start3), xh, xl,                       \
                             job_pick(j, w0, w1, w2, w3), job_pick(j, y0, y1, y2, y3), rows,                      \
                             job_pick(j, out0, out1, out2, out3), cols);                                          \
        L2_AHEAD();                                                                                               \
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
