// project_wgmma_bf16.cu: (Hopper; project_wgmma.rs says which rounds) rounds of 5 to 64 rows of bf16 weights on
// Hopper's warpgroup mma, with the bits of the decode kernels (project_mma_bf16). It shares project_wgmma.cu's
// pieces: the group's wgmmas (wg_group_mma), the residue walk (wg_next, wg_ring_turn) and the split launches' finish
// (wg_finish).

// bf16 weights [out, cols] (cols % 64 == 0) for rounds of 5 to 64 rows: the decode kernels' bf16 arithmetic
// (project_mma_bf16: residue r's groups as one mma chain from +0, hi + lo at its end, the residues' sums added in
// order) with A from the weights staged in shared memory as the wgmma prompt kernel stages them, and B from x's
// tiles. A block is one warpgroup over 64 outputs (warp w owns tile 4·blk + w) and up to 4·NT rows of part `part`.
// A stage: the group's B tile, then its weights, 128 bytes an output (16-byte chunks k at k ^ (output & 1), so a
// quarter warp's loads hit distinct banks). Stages live in dynamic shared memory (project_wgmma.rs sizes them).
// Stages: 3 up to 16 rows (12 KB each), 4 for the 64-column build (16 KB each). 27B bf16, call 125, rounds of
// 10 / 12 / 16 rows: 24.5 / 24.8 / 25.4 ms with 3 stages against 25.1 / 25.3 / 26.5 with 4; 32 rows 36.0 against
// 35.3. project_wgmma.rs sizes the dynamic shared memory to match.
#ifndef WG_BF16_STAGES
#define WG_BF16_STAGES 3
#endif
#define WG_BF16_N64_STAGES 4
template <int NT>
struct WgBf16Stage {
    static constexpr int ROWS = NT == 8 ? 32 : 16;
    static constexpr int W = ROWS / 16 * WG_TILE;  // offset of the weights
    static constexpr int BYTES = W + 64 * 128;
    static constexpr int PER_THREAD = 2 * (NT < 4 ? 4 : NT);  // a split block's partial sums a thread
};

template <int NT>
__device__ __forceinline__ void project_wgmma_bf16(int blk, const u16* __restrict__ w, float* __restrict__ y,
                                                   int rows, int out, int cols, int nw,
                                                   const u32* __restrict__ b_tiles, float* __restrict__ partial,
                                                   u32* __restrict__ tickets, int part) {
    typedef WgBf16Stage<NT> St;
    constexpr int STAGES = NT == 8 ? WG_BF16_N64_STAGES : WG_BF16_STAGES;
    if (part > 0) {
        const int first = 32 * part;
        y += (size_t)first * out;
        b_tiles += (size_t)(first / 16) * (cols / 64) * (WG_TILE / 4);  // x's tiles are row block major
        rows -= first;
    }
    DYNAMIC_SMEM(ring);  // STAGES · St::BYTES
    __shared__ int last;
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, warp = tid >> 5;
    const int tiles = (out + MMA_OUT - 1) / MMA_OUT, tile0 = blk * 4, ob = blk * 64;
    const int groups = cols / 64;
    const bool split = gridDim.y > 1;
    const int r0 = split ? (int)blockIdx.y : 0;
    const int jobs = split ? (r0 < groups ? (groups - 1 - r0) / nw + 1 : 0) : groups;
    // Each residue's chain starts at a +0 the compiler cannot see (as the 4-bit kernel's groups do).
    const float zero = opaque_zero();
    const SmemAddr ring_at = smem_addr(ring);
    // This thread's copies of a group: 2 (4 with 32 rows) pieces of B tiles and 4 chunks of weights.
    const unsigned char* bt = reinterpret_cast<const unsigned char*>(b_tiles) + tid * 16;
    const u16* wsrc[4];
    int wdst[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int c = tid + 128 * i, o = c >> 3, k = c & 7;
        wsrc[i] = w + (size_t)min(ob + o, out - 1) * cols + k * 8;  // past the last output, the last again
        wdst[i] = St::W + o * 128 + ((k ^ (o & 1)) * 16);
    }
#ifdef WG_BF16_BTILE_CG
    constexpr bool L1 = false;
#else
    constexpr bool L1 = true;  // x's tiles through L1 (see cp_async16_tile)
#endif
    // x's B tiles (which the previous kernel writes), then the weights (which no kernel writes).
    auto issue_x = [&](int stage, int G) {
        const SmemAddr sa = ring_at + stage * St::BYTES;
        const unsigned char* b = bt + (size_t)G * WG_TILE;
        cp_async16_tile<L1>(sa + tid * 16, b);
        if (NT >= 4) cp_async16_tile<L1>(sa + 2048 + tid * 16, b + 2048);
        if (NT == 8) {
            const unsigned char* b2 = b + (size_t)groups * WG_TILE;  // row block 1
            cp_async16_tile<L1>(sa + 4096 + tid * 16, b2);
            cp_async16_tile<L1>(sa + 6144 + tid * 16, b2 + 2048);
        }
    };
    auto issue_w = [&](int stage, int G) {
        const SmemAddr sa = ring_at + stage * St::BYTES;
#pragma unroll
        for (int i = 0; i < 4; ++i) cp_async16(sa + wdst[i], wsrc[i] + (size_t)G * 64, true);
    };
    auto issue = [&](int stage, int G) {
        issue_x(stage, G);
        issue_w(stage, G);
    };
    int Gi = r0, ri = r0;  // the copies' cursor
    // The first STAGES − 1 groups' weights before the previous kernel is done, x's tiles after (project_wgmma.cu).
    for (int s = 0, Ge = r0, re = r0; s < STAGES - 1; ++s) {
        if (s < jobs) {
            issue_w(s, Ge);
            wg_next(Ge, re, nw, groups);
        }
    }
    kernel_entry();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < jobs) {
            issue_x(s, Gi);
            wg_next(Gi, ri, nw, groups);
        }
        cp_async_commit();
    }
    float d[1][NT][4], tot[1][NT][2], acc[1][NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int k = 0; k < 4; ++k) d[0][nt][k] = zero;
        tot[0][nt][0] = tot[0][nt][1] = acc[0][nt][0] = acc[0][nt][1] = 0.0f;
    }
    int G = r0, r = r0;  // the math's cursor
    for (int j = 0; j < jobs; ++j) {
        wg_ring_turn<STAGES>(j, jobs, Gi, ri, nw, groups, issue);
        unsigned char* st = ring + (j % STAGES) * St::BYTES;
        // Step q = 2jj + h: project_mma_bf16's mma of word 2t + jj, pairs 2h and 2h + 1, outputs g and g + 8.
        u32 a[1][4][4];
        const unsigned char* wa = st + St::W + (16 * warp + g) * 128;
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
            const int at = ((2 * t + jj) ^ (g & 1)) * 16;  // outputs o and o + 8 have g's parity
            u32 pg[4], pg8[4];
            pairs_bf16(*reinterpret_cast<const uint4*>(wa + at), pg);
            pairs_bf16(*reinterpret_cast<const uint4*>(wa + 8 * 128 + at), pg8);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                a[0][2 * jj + h][0] = pg[2 * h];
                a[0][2 * jj + h][1] = pg8[2 * h];
                a[0][2 * jj + h][2] = pg[2 * h + 1];
                a[0][2 * jj + h][3] = pg8[2 * h + 1];
            }
        }
        wg_group_mma<NT, 1>(d, a, st, ring_at + (j % STAGES) * St::BYTES);  // waited for: the A registers are free
        const int rj = r;
        wg_next(G, r, nw, groups);
        if (r != rj) {
            // Residue rj's chain is done: hi + lo, after the residues before it (or, split, this block's sum).
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const HiLo v = hi_plus_lo(d[0][nt]);
                if (split) {
                    acc[0][nt][0] = v.g;
                    acc[0][nt][1] = v.g8;
                } else {
                    tot[0][nt][0] = rj == 0 ? v.g : tot[0][nt][0] + v.g;
                    tot[0][nt][1] = rj == 0 ? v.g8 : tot[0][nt][1] + v.g8;
                }
#pragma unroll
                for (int k = 0; k < 4; ++k) d[0][nt][k] = zero;
            }
        }
    }
    cp_async_wait<0>();
    wg_finish<NT, 1, St::PER_THREAD>(tot, acc, split, r0, groups, nw, partial, tickets, last, y, rows, out, tile0,
                                     tiles);
}

// Up to four bf16 matrices sharing x in one launch, as the 4-bit kernels share them (project_wgmma.cu): 64 outputs
// a block, stages in dynamic shared memory (held to 4 blocks an SM up to 16 rows, 3 with 32).
#define WGMMA_BF16(NT, SUF, BLOCKS)                                                                               \
    extern "C" __global__ void __launch_bounds__(128, BLOCKS) project_wgmma_bf16##SUF(                            \
        const u16* xh, const u16* xl, const float* xs, BF16_JOB(0), BF16_JOB(1), int start1, BF16_JOB(2),         \
        int start2, BF16_JOB(3), int start3, int rows, int cols, int nw, const u32* b_tiles, float* partial,      \
        u32* tickets) {                                                                                           \
        entry_after_weights(); /* the wait: in project_wgmma_bf16, after its first weights */                     \
        (void)xh, (void)xl, (void)xs; /* x comes as b_tiles */                                                    \
        const int parts = NT == 8 ? (rows + 31) / 32 : 1;                                                         \
        const int ob = (int)blockIdx.x / parts, part = (int)blockIdx.x - ob * parts;                              \
        const int j = job_of_block(ob, start1, start2, start3);                                                   \
        project_wgmma_bf16<NT>(ob - job_pick(j, 0, start1, start2, start3), job_pick(j, w0, w1, w2, w3),          \
                               job_pick(j, y0, y1, y2, y3), rows, job_pick(j, out0, out1, out2, out3), cols, nw,  \
                               b_tiles, partial, tickets, part);                                                  \
    }
WGMMA_BF16(2, _n16, 4)
WGMMA_BF16(4, , 4)
WGMMA_BF16(8, _n64, 3)
