// project_gemm.cu: prompt projections (a chunk of many rows) on tensor cores with big shared-memory tiles, each
// output getting exactly the bits the decode kernels (project_mma.cu, project_stream.cu) give it.
//
// Why the bits match: the decode kernels split an output's column groups over nw warps (warp w folds groups
// w, w + nw, w + 2nw, … into its own accumulator, in that order) and add the warps' sums in warp order. Here
// one warp owns a tile of outputs × rows over all the columns and walks the groups residue by residue: 0, nw,
// 2nw, …, then 1, nw + 1, …; each residue's chain is a decode warp's (the same mma fragments in the same k
// order, the same per-group scale fma), and at each residue's end total = p0, then total += p1, … (the decode
// finish's order). nw is the decode plan's warp count for the matrix (a number of the shape alone, from the
// host), so a row's bits still depend on nothing but its own x.
//
// Tiles: a block owns OW·64 outputs × 64 rows (the kernels built have OW = 1); its OW × 4 warps own 64 outputs
// (4 m-tiles) × 16 rows (4 n-tiles of 4 rows, hi and lo side by side as in project_mma.cu) each. A stage holds
// one column group of the block's x (hi, lo, group sums) and weights (codes, scales, biases), copied by cp.async
// D − 1 groups ahead; 4-bit codes are then unpacked once for the block (gemm_unpack). A block reads x once per
// 64 outputs where a decode block of 32 rows reads it once per 32 outputs (the prompt chunk was bound by those L2
// reads), and the weights once per 64 rows.

#define GEMM_ROWS 64  // rows per block
#define GEMM_MT 4     // m-tiles (16 outputs) per warp
#define GEMM_NT 4     // n-tiles (TILE_ROWS rows) per warp
#define GEMM_WR 4     // warps across a block's rows (per OW)
#define GEMM_GROUP 8  // row blocks that walk the output tiles together (gemm_block)

// The (output tile, row block) of this block. Blocks launch in x-major order; taken as numbered (tiles inner),
// every row block streams the whole matrix from memory in turn. For bf16 weights, groups of GEMM_GROUP row blocks
// walk the tiles together instead, the group's row blocks of one tile side by side: they read its weights once
// from memory and the rest from L2, where the group's rows of x (8 × 64 rows) stay. 4-bit weights, a quarter of
// the bytes, keep the numbered order, which measured faster for them (BENCHMARKS.md §7). TF_GEMM_TILES_FIRST
// numbers every family's blocks for same-run comparisons (project.rs); every block computes the same either way.
template <bool Q4>
__device__ __forceinline__ void gemm_block(int& tile, int& rb) {
#ifndef TF_GEMM_TILES_FIRST
    if constexpr (!Q4) {
        const int tiles = gridDim.x, id = blockIdx.y * tiles + blockIdx.x;
        const int group = id / (GEMM_GROUP * tiles), first = group * GEMM_GROUP;
        const int in_group = min(GEMM_GROUP, (int)gridDim.y - first), k = id - first * tiles;
        tile = k / in_group;
        rb = first + k % in_group;
        return;
    }
#endif
    tile = blockIdx.x;
    rb = blockIdx.y;
}

// One stage in shared memory: x hi and x lo [64 rows][GS] bf16, weights [BO outputs][WB bytes]; for 4-bit
// weights also per output the aligned words holding its scale and its bias, and per row x's WPL chunk sums.
template <int WPL, int OW, bool Q4>
struct GemmStage {
    static constexpr int GS = 32 * WPL;            // columns per group
    static constexpr int CPR = GS / 8;             // 16-byte chunks per row of x (and of bf16 weights)
    static constexpr int BO = OW * 16 * GEMM_MT;   // outputs per block
    static constexpr int XB = GEMM_ROWS * GS * 2;  // bytes of x hi (and of x lo)
    // x lo's offset: rows of 64 bytes put it half a bank window on, so a row's hi and lo (read by one quarter
    // warp) hit distinct banks; rows of 128 bytes get that from gemm_x_at's swap instead.
    static constexpr int X_LO = XB + (CPR == 8 ? 0 : 64);
    static constexpr int WB = Q4 ? GS / 2 : GS * 2;
    static constexpr int WCPR = WB / 16;           // 16-byte chunks per output's weights
    static constexpr int W_OFF = X_LO + XB;
    static constexpr int SB_OFF = W_OFF + BO * WB;
    static constexpr int XS_OFF = SB_OFF + (Q4 ? BO * 8 : 0);
    static constexpr int BYTES = XS_OFF + (Q4 ? GEMM_ROWS * WPL * 4 : 0);
    static constexpr int THREADS = OW * GEMM_WR * 32;
};

// Where 16-byte chunk c of a 128-byte row r sits: odd rows swap neighbouring chunks, so the 8 lanes of a
// quarter warp hit distinct banks. Rows of 64 bytes need no swap.
template <int CPR>
__device__ __forceinline__ int gemm_swz(int r, int c) {
    return CPR == 8 ? c ^ (r & 1) : c;
}

// Byte offset in a stage of chunk c of x row r, half `lo` (0 hi, 1 lo): a quarter warp reads one row's hi and lo
// at the same chunks, so lo rows are swapped as the next row would be.
template <int WPL, int OW, bool Q4>
__device__ __forceinline__ int gemm_x_at(int r, int c, int lo) {
    typedef GemmStage<WPL, OW, Q4> St;
    return (lo ? St::X_LO : 0) + r * (St::GS * 2) + gemm_swz<St::CPR>(r + lo, c) * 16;
}

// Copies column group G of the block's x rows (from rt0) and weight outputs (from ob) into the stage at `st`.
// Rows and outputs past the end copy the last valid one (their results are never written). Each thread's chunks
// are fixed by its index (loops of constant trip counts, unrolled: the address arithmetic is a few integer ops
// per 16 bytes, not a division each).
template <int WPL, int OW, bool Q4, typename S>
__device__ __forceinline__ void gemm_issue(SmemAddr st, int G, const u16* __restrict__ xh,
                                           const u16* __restrict__ xl, const float* __restrict__ xs,
                                           const void* __restrict__ wdata, const typename S::raw* __restrict__ scales,
                                           const typename S::raw* __restrict__ biases, int rt0, int ob, int rows,
                                           int out, int cols) {
    typedef GemmStage<WPL, OW, Q4> St;
    constexpr int T = St::THREADS, CPR = St::CPR, WCPR = St::WCPR;
    static_assert(T % CPR == 0 && (GEMM_ROWS * CPR) % T == 0 && T % WCPR == 0, "gemm_issue's chunk split");
    const int tid = threadIdx.x;
    {  // x hi and lo: thread tid takes chunk tid % CPR of rows tid / CPR + i·T/CPR
        const int k = tid % CPR;
        const size_t col = (size_t)G * St::GS + k * 8;
#pragma unroll
        for (int i = 0; i < GEMM_ROWS * CPR / T; ++i) {
            const int r = tid / CPR + i * (T / CPR);
            const size_t at = (size_t)min(rt0 + r, rows - 1) * cols + col;
            cp_async16(st + gemm_x_at<WPL, OW, Q4>(r, k, 0), xh + at, true);
            cp_async16(st + gemm_x_at<WPL, OW, Q4>(r, k, 1), xl + at, true);
        }
    }
    {  // weights: chunk tid % WCPR of outputs tid / WCPR + i·T/WCPR
        const int k = tid % WCPR;
#pragma unroll
        for (int i = 0; i < (St::BO * WCPR + T - 1) / T; ++i) {
            const int o = tid / WCPR + i * (T / WCPR);
            if ((St::BO * WCPR) % T == 0 || o < St::BO) {
                // 4-bit codes are tile-major (common.cu a4_tile_code), bf16 weights row-major.
                const int oc = min(ob + o, out - 1), groups = cols / St::GS;
                const unsigned char* src = reinterpret_cast<const unsigned char*>(wdata) + k * 16 +
                                           (Q4 ? a4_tile_code(oc, G, groups, St::WB)
                                               : ((size_t)oc * groups + G) * St::WB);
                cp_async16(st + St::W_OFF + o * St::WB + (Q4 ? k : gemm_swz<WCPR>(o, k)) * 16, src, true);
            }
        }
    }
    if constexpr (Q4) {
        const int groups = cols / St::GS, chunks = cols / 32;
        // Scales and biases: the aligned words holding them (a 2-byte value shares its word with a neighbour's).
#pragma unroll
        for (int i = 0; i < (St::BO * 2 + T - 1) / T; ++i) {
            const int c = tid + i * T;
            if ((St::BO * 2) % T == 0 || c < St::BO * 2) {
                const size_t at = a4_tile_param(min(ob + (c >> 1), out - 1), G, groups);
                const unsigned char* p = reinterpret_cast<const unsigned char*>((c & 1) ? biases : scales) +
                                         at * sizeof(typename S::raw);
                cp_async4(st + St::SB_OFF + c * 4, reinterpret_cast<const void*>((size_t)p & ~(size_t)3), true);
            }
        }
#pragma unroll
        for (int i = 0; i < (GEMM_ROWS * WPL + T - 1) / T; ++i) {
            const int c = tid + i * T;
            if ((GEMM_ROWS * WPL) % T == 0 || c < GEMM_ROWS * WPL) {
                const int row = min(rt0 + c / WPL, rows - 1);
                cp_async4(st + St::XS_OFF + c * 4, xs + (size_t)row * chunks + (size_t)G * WPL + c % WPL, true);
            }
        }
    }
}

// One word step of one tile: project_mma.cu's mma_word for one n-tile, with the A fragments ready: a0 = (P0 of
// output g, P0 of g + 8, P1 of g, P1 of g + 8), a1 the same of P2 and P3; b this lane's half of x.
__device__ __forceinline__ void gemm_word(float (&c)[4], uint4 a0, uint4 a1, uint4 b) {
    mma_bf16(c, a0.x, a0.y, a0.z, a0.w, b.x, b.y);
    mma_bf16(c, a1.x, a1.y, a1.z, a1.w, b.z, b.w);
}

// A 4-bit stage's codes, scales, biases and x sums made ready for every warp, once per block (each warp would
// otherwise unpack the same codes for its own rows): the four exact bf16 pairs of each output and word, stored as
// the A fragments of gemm_word (per m-tile, word step j and half, one 16-byte fragment per lane, in lane order,
// so a warp's load of them touches each bank once); per output its scale and bias as f32; per row x's group sum
// (0 + the chunk sums in order, as project_stream_a4 adds them).
template <int WPL, int OW, typename S>
__device__ __forceinline__ void gemm_unpack(const unsigned char* st, unsigned char* un, int G, int ob, int out,
                                            int groups, u32 mask) {
    typedef GemmStage<WPL, OW, true> St;
    constexpr int WPO = St::GS / 8;  // words per output per group
    constexpr int T = St::THREADS, ITEMS = St::BO / 16 * 8 * WPO;  // (m-tile, output g < 8, word)
    static_assert(ITEMS % T == 0 && (St::BO * 2) % T == 0, "gemm_unpack's split");
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < ITEMS / T; ++i) {
        const int c = tid + i * T, w = c % WPO, g = (c / WPO) % 8, mb = c / (WPO * 8);
        const unsigned char* q = st + St::W_OFF + (mb * 16 + g) * St::WB + w * 4;
        u32 p[4], p8[4];
        pairs_a4_masked(*reinterpret_cast<const u32*>(q), mask, p);
        pairs_a4_masked(*reinterpret_cast<const u32*>(q + 8 * St::WB), mask, p8);
        const int lane = g * 4 + w / WPL, j = w % WPL;
        unsigned char* a = un + (((mb * WPL + j) * 2) * 32 + lane) * 16;
        const uint4 a0 = {p[0], p8[0], p[1], p8[1]}, a1 = {p[2], p8[2], p[3], p8[3]};
        *reinterpret_cast<uint4*>(a) = a0;
        *reinterpret_cast<uint4*>(a + 32 * 16) = a1;
    }
    float* sbf = reinterpret_cast<float*>(un + St::BO * WPO * 16);
#pragma unroll
    for (int i = 0; i < St::BO * 2 / T; ++i) {
        const int c = tid + i * T;
        const u32 sub = (u32)(a4_tile_param(min(ob + (c >> 1), out - 1), G, groups) * sizeof(typename S::raw)) & 3u;
        sbf[c] = S::get(*reinterpret_cast<const typename S::raw*>(st + St::SB_OFF + c * 4 + sub));
    }
    const float* xss = reinterpret_cast<const float*>(st + St::XS_OFF);
    for (int r = threadIdx.x; r < GEMM_ROWS; r += St::THREADS) {
        float sx = 0.0f;
#pragma unroll
        for (int k = 0; k < WPL; ++k) sx += xss[r * WPL + k];
        sbf[St::BO * 2 + r] = sx;
    }
}

// Bytes of gemm_unpack's output.
template <int WPL, int OW>
__host__ __device__ constexpr int gemm_unpacked_bytes() {
    return GemmStage<WPL, OW, true>::BO * (WPL * 4 * 16 + 8) + GEMM_ROWS * 4;
}

// y = x Wᵀ for bf16 weights (Q4 false: wdata is [out, cols] bf16, WPL = 2, S unused) or MLX 4-bit codes (wdata
// is tile-major (a4_tile_code), group 32·WPL, scales and biases of type S). D stages.
template <int WPL, int OW, bool Q4, typename S, int D>
__device__ __forceinline__ void project_gemm(const u16* __restrict__ xh, const u16* __restrict__ xl,
                                             const float* __restrict__ xs, const void* __restrict__ wdata,
                                             const typename S::raw* __restrict__ scales,
                                             const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                             int rows, int out, int cols, int nw) {
    typedef GemmStage<WPL, OW, Q4> St;
    constexpr int UN = Q4 ? gemm_unpacked_bytes<WPL, OW>() : 0;
    constexpr int WPO = St::GS / 8;  // 16-byte words per output per group (pairs of 4-bit ones, bf16 ones)
    __shared__ __align__(16) unsigned char smem[D * St::BYTES + UN];
    unsigned char* un = smem + D * St::BYTES;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    const int wo = warp / GEMM_WR, wr = warp % GEMM_WR;  // this warp's outputs and rows in the block
    int tile, rb;
    gemm_block<Q4>(tile, rb);
    const int ob = tile * St::BO, rt0 = rb * GEMM_ROWS;
    const int groups = cols / St::GS;
    const u32 mask = opaque_nibble_mask();
    const SmemAddr smem_s = smem_addr(smem);
    // The groups in residue order: (residue r, group G), issue running D − 1 groups ahead of compute.
    int iG = 0, ir = 0, cG = 0, cr = 0;
#pragma unroll
    for (int s = 0; s < D - 1; ++s) {
        if (s < groups) {
            gemm_issue<WPL, OW, Q4, S>(smem_s + s * St::BYTES, iG, xh, xl, xs, wdata, scales, biases, rt0, ob, rows,
                                       out, cols);
            iG += nw;
            if (iG >= groups) iG = ++ir;
        }
        cp_async_commit();
    }
    // c: C fragments (hi and lo sums side by side), of one group for 4-bit weights (then scaled into acc), of the
    // whole residue for bf16 ones; tot: the residues' sums so far (the decode finish's order).
    float c[GEMM_MT][GEMM_NT][4], acc[GEMM_MT][GEMM_NT][2], tot[GEMM_MT][GEMM_NT][2];
#pragma unroll
    for (int m = 0; m < GEMM_MT; ++m)
#pragma unroll
        for (int n = 0; n < GEMM_NT; ++n) {
#pragma unroll
            for (int i = 0; i < 4; ++i) c[m][n][i] = 0.0f;
            acc[m][n][0] = acc[m][n][1] = tot[m][n][0] = tot[m][n][1] = 0.0f;
        }
    for (int s = 0; s < groups; ++s) {
        cp_async_wait<D - 2>();  // group s has landed for this thread ...
        __syncthreads();         // ... and for all; every warp is done with group s − 1's slot (and `un`)
        if (s + D - 1 < groups) {
            gemm_issue<WPL, OW, Q4, S>(smem_s + ((unsigned)(s + D - 1) % D) * St::BYTES, iG, xh, xl, xs, wdata,
                                       scales, biases, rt0, ob, rows, out, cols);
            iG += nw;
            if (iG >= groups) iG = ++ir;
        }
        cp_async_commit();
        const unsigned char* st = smem + ((unsigned)s % D) * St::BYTES;
        if constexpr (Q4) {
            gemm_unpack<WPL, OW, S>(st, un, cG, ob, out, groups, mask);
            __syncthreads();
#pragma unroll
            for (int m = 0; m < GEMM_MT; ++m)
#pragma unroll
                for (int n = 0; n < GEMM_NT; ++n)
#pragma unroll
                    for (int i = 0; i < 4; ++i) c[m][n][i] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < WPL; ++j) {
            uint4 b[GEMM_NT];  // this lane's half (g odd: lo) of row g / 2 of each n-tile
#pragma unroll
            for (int n = 0; n < GEMM_NT; ++n) {
                const int r = wr * (GEMM_NT * TILE_ROWS) + n * TILE_ROWS + (g >> 1);
                b[n] = *reinterpret_cast<const uint4*>(st + gemm_x_at<WPL, OW, Q4>(r, t * WPL + j, g & 1));
            }
#pragma unroll
            for (int m = 0; m < GEMM_MT; ++m) {
                const int mb = wo * GEMM_MT + m, o = mb * 16 + g;
                uint4 a0, a1;
                if constexpr (Q4) {
                    const unsigned char* a = un + (((mb * WPL + j) * 2) * 32 + lane) * 16;
                    a0 = *reinterpret_cast<const uint4*>(a);
                    a1 = *reinterpret_cast<const uint4*>(a + 32 * 16);
                } else {
                    const unsigned char* wb = st + St::W_OFF;
                    u32 pg[4], pg8[4];
                    pairs_bf16(*reinterpret_cast<const uint4*>(wb + (o * WPO + gemm_swz<WPO>(o, t * 2 + j)) * 16), pg);
                    pairs_bf16(
                        *reinterpret_cast<const uint4*>(wb + ((o + 8) * WPO + gemm_swz<WPO>(o + 8, t * 2 + j)) * 16),
                        pg8);
                    a0 = {pg[0], pg8[0], pg[1], pg8[1]};
                    a1 = {pg[2], pg8[2], pg[3], pg8[3]};
                }
#pragma unroll
                for (int n = 0; n < GEMM_NT; ++n) gemm_word(c[m][n], a0, a1, b[n]);
            }
        }
        if constexpr (Q4) {
            // The group's scale and bias per output, x's group sum per row: project_stream_a4's fmas.
            const float* sbf = reinterpret_cast<const float*>(un + St::BO * WPO * 16);
#pragma unroll
            for (int m = 0; m < GEMM_MT; ++m) {
                const int o = (wo * GEMM_MT + m) * 16 + g;
                const float s0 = sbf[o * 2], b0 = centred_bias(s0, sbf[o * 2 + 1]);
                const float s8 = sbf[(o + 8) * 2], b8 = centred_bias(s8, sbf[(o + 8) * 2 + 1]);
#pragma unroll
                for (int n = 0; n < GEMM_NT; ++n) {
                    const float sx = sbf[St::BO * 2 + wr * (GEMM_NT * TILE_ROWS) + n * TILE_ROWS + t];
                    const HiLo v = hi_plus_lo(c[m][n]);
                    acc[m][n][0] = fmaf(b0, sx, fmaf(s0, v.g, acc[m][n][0]));
                    acc[m][n][1] = fmaf(b8, sx, fmaf(s8, v.g8, acc[m][n][1]));
                }
            }
        }
        // The end of a residue: its sum joins the total (the decode finish adds warp w's sum after w − 1's).
        cG += nw;
        if (cG >= groups) {
#pragma unroll
            for (int m = 0; m < GEMM_MT; ++m)
#pragma unroll
                for (int n = 0; n < GEMM_NT; ++n) {
                    HiLo v;
                    if constexpr (Q4) {
                        v = HiLo{acc[m][n][0], acc[m][n][1]};
                    } else {
                        v = hi_plus_lo(c[m][n]);
#pragma unroll
                        for (int i = 0; i < 4; ++i) c[m][n][i] = 0.0f;
                    }
                    tot[m][n][0] = cr == 0 ? v.g : tot[m][n][0] + v.g;
                    tot[m][n][1] = cr == 0 ? v.g8 : tot[m][n][1] + v.g8;
                    acc[m][n][0] = acc[m][n][1] = 0.0f;
                }
            cG = ++cr;
        }
    }
    cp_async_wait<0>();
    // Decode warps past the last group add their zero sums (which only turns a −0 total into +0).
#pragma unroll
    for (int m = 0; m < GEMM_MT; ++m)
#pragma unroll
        for (int n = 0; n < GEMM_NT; ++n)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                if (nw > groups) tot[m][n][i] += 0.0f;
                const int o = ob + (wo * GEMM_MT + m) * 16 + g + 8 * i;
                const int row = rt0 + wr * (GEMM_NT * TILE_ROWS) + n * TILE_ROWS + t;
                if (o < out && row < rows) y[(size_t)row * out + o] = tot[m][n][i];
            }
}

// 168 registers for 3 blocks an SM (call 47: 2k prefill of the 27B MLX4 shape 1,590 tok/s at 2 blocks an SM, and
// 1,460 with 8 warps of 32 outputs × 16 rows a block; call 48: 1,675 at 3).
#define GEMM_A4(WPL, NAME, S, D)                                                                                 \
    extern "C" __global__ void __launch_bounds__(128, 3)                                                          \
        project_gemm_a4_g##WPL##_##NAME(const u16* xh, const u16* xl, const float* xs, const u32* codes,          \
                                        const S::raw* scales, const S::raw* biases, float* y, int rows, int out, \
                                        int cols, int nw) {                                                      \
        kernel_entry();                                                                                          \
        project_gemm<WPL, 1, true, S, D>(xh, xl, xs, codes, scales, biases, y, rows, out, cols, nw);           \
    }
#define GEMM_A4_ALL(WPL, D) GEMM_A4(WPL, f32, F32T, D) GEMM_A4(WPL, f16, F16T, D) GEMM_A4(WPL, bf16, BF16T, D)
// Shared memory per block: D stages × (16 KB·WPL of x + 2.5 KB·WPL of weights and sums) + 8.8 KB·WPL unpacked,
// within 48 KB. (Blocks of 128 outputs were slower on the H200, call 20, and their unpacked weights do not fit.)
GEMM_A4_ALL(1, 4)
GEMM_A4_ALL(2, 2)

// bf16 weights: 64-column groups, blocks of 64 outputs (two stages of 24 KB).
extern "C" __global__ void __launch_bounds__(128, 3)
    project_gemm_bf16(const u16* xh, const u16* xl, const u16* w, float* y, int rows, int out, int cols, int nw) {
    kernel_entry();
    project_gemm<2, 1, false, F32T, 2>(xh, xl, nullptr, w, nullptr, nullptr, y, rows, out, cols, nw);
}
