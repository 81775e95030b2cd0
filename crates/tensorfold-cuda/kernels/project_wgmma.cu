// project_wgmma.cu: (Hopper; project_wgmma.rs says which rounds) rounds of 5 to 64 rows of MLX 4-bit g64 weights on
// Hopper's warpgroup mma (wgmma m64n16k16, m64n32k16, m64n64k16), with the bits of the decode kernels (project_stream.cu).
//
// Why the bits match: wgmma gives a chain of mma.sync m16n8k16 bit for bit when each k16 step holds the same
// operands in the same slots (call 93, bench/probe/wgmma_bits.cu). A block is one warpgroup: warp w owns the 16
// outputs of tiles 8·blockIdx.x + w and 8·blockIdx.x + 4 + w (or, with MT = 1, of tile 4·blockIdx.x + w), each an
// m16 tile of the mma (the A fragments are project_stream's, unpacked the same way), and the rows are the B columns
// (hi and lo side by side, TILE_ROWS rows an n-tile: 8 rows 16 columns, 16 rows 32, 32 rows 64 from two of x's
// 16-row tiles side by side; rounds of more than 32 rows give each block of outputs a block per part of 32 rows, the
// parts side by side in the grid so that they read the same weights at about the same time, from L2). The decode kernels split an output's groups over nw warps (warp r folds groups r, r + nw, …) and
// add the warps' sums in warp order; here a block walks residue r's groups in order and the residues' sums are
// added in residue order (by the block itself, or by the last of the blocks a split launch gives each residue):
// the same per-group scale fmas, the same order. The B tile puts each k16 step's x words where mma.sync's lanes would
// feed them (project_mma.cu wg_tile_at).
//
// Needs the module built for sm_90a (nvrtc.rs): for sm_90 ptxas refuses wgmma, and the kernel traps.

// +0.0f from a shuffle, so the compiler cannot fold it.
__device__ __forceinline__ float opaque_zero() {
#ifdef TF_EMU
    return 0.0f;
#else
    return __shfl_sync(FULL_MASK, 0.0f, 0);
#endif
}

#if !defined(TF_EMU) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The shared-memory matrix descriptor of a B step at `addr` (no swizzle; LBO 128, SBO 1,024).
__device__ __forceinline__ u64 wg_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(128 >> 4) << 16) | ((u64)(1024 >> 4) << 32);
}
#endif

// Pins the accumulators: the compiler may neither move their writes below this point nor their reads above it.
template <int NT, int MT>
__device__ __forceinline__ void wg_pin(float (&d)[MT][NT][4]) {
#ifndef TF_EMU
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int k = 0; k < 4; ++k) asm volatile("" : "+f"(d[m][nt][k])::"memory");
#else
    (void)d;
#endif
}

// d[m] += A[m]·B for the group's four k16 steps and the block's m64 blocks m: a[m][q] the A fragment of step q,
// the B tile at `bt` (`bts` its shared address), NT n-tiles of 8 columns (8: 32 rows, m64n64k16; 4: 16 rows,
// m64n32k16; 2: 8 rows, m64n16k16). d[m][nt] is the C fragment of n-tile nt, as mma.sync's.
// FRESH (FRESH_GROUPS, project_mma.cu): the first step takes no C (scale-d off, D = A·B), so d needs no zeroing;
// the emulator models it as a C of +0 (its mma gives a zero sum as +0, as the tensor cores do).
template <int NT, int MT, bool FRESH = false>
__device__ __forceinline__ void wg_group_mma(float (&d)[MT][NT][4], u32 (&a)[MT][4][4],
                                             const unsigned char* bt, SmemAddr bts) {
#ifdef TF_EMU
    // The emulator feeds each n-tile to its mma.sync model with the B words mma.sync's lanes would hold.
    (void)bts;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (FRESH)
        for (int m = 0; m < MT; ++m)
            for (int nt = 0; nt < NT; ++nt)
                for (int k = 0; k < 4; ++k) d[m][nt][k] = 0.0f;
    for (int q = 0; q < 4; ++q)
        for (int m = 0; m < MT; ++m)
            for (int nt = 0; nt < NT; ++nt) {
                const unsigned char* s = bt + q * WG_STEP;
                const u32 b0 = *reinterpret_cast<const u32*>(s + wg_b_at(nt * 8 + g, 2 * t));
                const u32 b1 = *reinterpret_cast<const u32*>(s + wg_b_at(nt * 8 + g, 2 * t + 8));
                emu_mma_bf16(d[m][nt], a[m][q][0], a[m][q][1], a[m][q][2], a[m][q][3], b0, b1);
            }
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
    (void)bt;
    // The accumulators and A fragments are pinned before the fence and the accumulators again after the wait:
    // the compiler must neither move their writes past the fence nor read the results before the wait (the
    // probe's ordering).
    wg_pin<NT, MT>(d);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int k = 0; k < 4; ++k) asm volatile("" : "+r"(a[m][q][k])::"memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const u64 desc = wg_desc(bts + q * WG_STEP);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            if constexpr (NT == 8)
                asm volatile(
                    "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                    "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
                    "{%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
                    : "+f"(d[m][0][0]), "+f"(d[m][0][1]), "+f"(d[m][0][2]), "+f"(d[m][0][3]), "+f"(d[m][1][0]),
                      "+f"(d[m][1][1]), "+f"(d[m][1][2]), "+f"(d[m][1][3]), "+f"(d[m][NT - 6][0]),
                      "+f"(d[m][NT - 6][1]), "+f"(d[m][NT - 6][2]), "+f"(d[m][NT - 6][3]), "+f"(d[m][NT - 5][0]),
                      "+f"(d[m][NT - 5][1]), "+f"(d[m][NT - 5][2]), "+f"(d[m][NT - 5][3]), "+f"(d[m][NT - 4][0]),
                      "+f"(d[m][NT - 4][1]), "+f"(d[m][NT - 4][2]), "+f"(d[m][NT - 4][3]), "+f"(d[m][NT - 3][0]),
                      "+f"(d[m][NT - 3][1]), "+f"(d[m][NT - 3][2]), "+f"(d[m][NT - 3][3]), "+f"(d[m][NT - 2][0]),
                      "+f"(d[m][NT - 2][1]), "+f"(d[m][NT - 2][2]), "+f"(d[m][NT - 2][3]), "+f"(d[m][NT - 1][0]),
                      "+f"(d[m][NT - 1][1]), "+f"(d[m][NT - 1][2]), "+f"(d[m][NT - 1][3])
                    : "r"(a[m][q][0]), "r"(a[m][q][1]), "r"(a[m][q][2]), "r"(a[m][q][3]), "l"(desc),
                      "r"(FRESH && q == 0 ? 0 : 1)
                    : "memory");
            else if constexpr (NT == 4)
                asm volatile(
                    "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                    "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
                    : "+f"(d[m][0][0]), "+f"(d[m][0][1]), "+f"(d[m][0][2]), "+f"(d[m][0][3]), "+f"(d[m][1][0]),
                      "+f"(d[m][1][1]), "+f"(d[m][1][2]), "+f"(d[m][1][3]), "+f"(d[m][NT - 2][0]),
                      "+f"(d[m][NT - 2][1]), "+f"(d[m][NT - 2][2]), "+f"(d[m][NT - 2][3]), "+f"(d[m][NT - 1][0]),
                      "+f"(d[m][NT - 1][1]), "+f"(d[m][NT - 1][2]), "+f"(d[m][NT - 1][3])
                    : "r"(a[m][q][0]), "r"(a[m][q][1]), "r"(a[m][q][2]), "r"(a[m][q][3]), "l"(desc),
                      "r"(FRESH && q == 0 ? 0 : 1)
                    : "memory");
            else
                asm volatile(
                    "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                    "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                    "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
                    : "+f"(d[m][0][0]), "+f"(d[m][0][1]), "+f"(d[m][0][2]), "+f"(d[m][0][3]), "+f"(d[m][NT - 1][0]),
                      "+f"(d[m][NT - 1][1]), "+f"(d[m][NT - 1][2]), "+f"(d[m][NT - 1][3])
                    : "r"(a[m][q][0]), "r"(a[m][q][1]), "r"(a[m][q][2]), "r"(a[m][q][3]), "l"(desc),
                      "r"(FRESH && q == 0 ? 0 : 1)
                    : "memory");
        }
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    wg_pin<NT, MT>(d);
#else
    (void)d; (void)a; (void)bt; (void)bts;
    __trap();
#endif
}

// A stage of the block's copy ring: one group's B tile (of 32 rows: x's two 16-row tiles side by side, the second's
// column cores 1,024 bytes on from the first's last, as wg_b_at counts), its 4·MT tiles' codes (512 bytes each, as
// stored), their scales and biases (16 a tile each, as stored), and the rows' x sums of its two 32-column chunks.
#define WG_STAGES 4
// The 64-column build's stages: 3 of 11 KB, so 5 blocks fit an SM (WG_N64_BLOCKS). Call 123, 27B MLX4 rounds of
// 32 rows: 20.0-20.2 ms with 3 stages and 5 blocks against 20.6 with 4 and 4 (both split below 4,097 blocks).
#ifndef WG_N64_STAGES
#define WG_N64_STAGES 3
#endif
template <int NT, int MT>
struct WgStage {
    static constexpr int ROWS = NT == 8 ? 32 : 16;        // rows the stage has room for (x sums, copies)
    // m64 blocks the stage has room for: 16-row stages keep room for two whatever MT, and a whole 1,024 bytes for
    // the sums (their layout since call 101); the 32-row one has just what it needs, so four stages fit 48 KB.
    static constexpr int ROOM = NT == 8 ? MT : 2;
    static constexpr int CODES = ROWS / 16 * WG_TILE;        // offset of the codes
    static constexpr int PARAMS = CODES + 4 * ROOM * 512;    // scales then biases of tile 0, then tile 1, … (16 raw each)
    static constexpr int XSUMS = PARAMS + 4 * ROOM * 2 * 64;  // ROWS rows × 2 floats
    // A multiple of 1,024, so every stage's B tile stays aligned.
    static constexpr int BYTES = NT == 8 ? (XSUMS + ROWS * 8 + 1023) / 1024 * 1024 : XSUMS + 1024;
    static constexpr int PER_THREAD = 2 * MT * (NT < 4 ? 4 : NT);  // a split block's partial sums a thread
};

// Where this thread's copies of a group come from, fixed for the block: each source's address at group 0 (the
// copies of group G add G times its stride), so a group's copies cost an add and a cp.async each.
template <typename S, int MT>
struct WgSources {
    const unsigned char* tile2;                // rows 16..31's B tiles (32-row stages), the same pieces
    static constexpr int RUN_WORDS = 4 * (int)sizeof(typename S::raw);  // words of a run of 16 scales or biases
    static constexpr int PARAM_COPIES = (8 * MT * RUN_WORDS + 127) / 128;
    const unsigned char* tile;                 // the B tiles: 2 pieces of 16 bytes (+ G·WG_TILE)
    const unsigned char* code[MT];             // 16 bytes of tile 4m + tid / 32's codes (+ G·512)
    const unsigned char* param[PARAM_COPIES];  // a word of a run (tile, scales | biases) (+ G·16·raw), or null
    const float* xsum;                         // x's sum of chunk 2G + tid % 2 of row tid / 2 (+ 2G), or null
};

template <typename S, int NT, int MT>
__device__ __forceinline__ WgSources<S, MT> wg_sources(int tile0, int tiles, const unsigned char* __restrict__ btiles,
                                                   const float* __restrict__ xs, const u32* __restrict__ codes,
                                                   const typename S::raw* __restrict__ scales,
                                                   const typename S::raw* __restrict__ biases, int rows, int cols,
                                                   int groups) {
    using W = WgSources<S, MT>;
    const int tid = threadIdx.x;
    W src;
    src.tile = btiles + tid * 16;
    src.tile2 = NT == 8 ? src.tile + (size_t)groups * WG_TILE : nullptr;  // row block 1 (tiles are row block major)
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        const int c = tid + 128 * m, ct = min(tile0 + (c >> 5), tiles - 1);
        src.code[m] = reinterpret_cast<const unsigned char*>(codes) + a4_tile_code(ct * 16, 0, groups, 32) +
                      (c & 31) * 16;
    }
#pragma unroll
    for (int i = 0; i < W::PARAM_COPIES; ++i) {
        const int c = tid + 128 * i, run = c / W::RUN_WORDS, word = c % W::RUN_WORDS;
        const int pt = min(tile0 + (run >> 1), tiles - 1);
        src.param[i] = c < 8 * MT * W::RUN_WORDS
                           ? reinterpret_cast<const unsigned char*>((run & 1) ? biases : scales) +
                                 a4_tile_param(pt * 16, 0, groups) * sizeof(typename S::raw) + word * 4
                           : nullptr;
    }
    src.xsum = tid < 2 * WgStage<NT, MT>::ROWS ? xs + (size_t)min(tid >> 1, rows - 1) * (cols / 32) + (tid & 1)
                                                : nullptr;
    return src;
}

// 16 bytes of x's B tiles global → shared. Every block of a launch reads the same tiles. The 4-bit kernel copies
// them past L1 (cp.async.cg), as its weights: through L1 (cp.async.ca, where an SM's other blocks at the same group
// may find them) its rounds were 1 to 2% slower on the H200 (call 128). The bf16 kernel copies them through L1: a
// block of 64 outputs stages as many bytes of a 16-row tile a group as of weights (4 KB each), and through L1 its
// 16-row 27B rounds took 19.5 ms instead of 24.6 (call 128); -DWG_BF16_BTILE_CG (TENSORFOLD_CUDA_DEFINES) keeps
// them past L1 for a same-run comparison. The bytes, so the bits, are the same either way.
template <bool VIA_L1 = false>
__device__ __forceinline__ void cp_async16_tile(SmemAddr dst, const void* src) {
#if !defined(TF_EMU)
    if constexpr (VIA_L1) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
        return;
    }
#endif
    cp_async16(dst, src, true);
}

// Issues this thread's copies of group G into `st` (the caller commits): the group's B tile (16 bytes a piece,
// past L1), the codes (likewise: read once), the scales, biases and x sums (4 bytes).
// X: x's pieces (the B tile, the sums), which the previous kernel writes; WT: the weights' (codes, scales, biases),
// which no kernel writes, so they may be copied before kernel_entry.
template <typename S, int NT, int MT, bool X = true, bool WT = true>
__device__ __forceinline__ void wg_issue(unsigned char* st, int G, const WgSources<S, MT>& src) {
    using W = WgSources<S, MT>;
    const int tid = threadIdx.x;
    const SmemAddr sa = smem_addr(st);
    const unsigned char* bt = src.tile + (size_t)G * WG_TILE;
    if (X) {
        cp_async16_tile(sa + tid * 16, bt);
        if (NT >= 4) cp_async16_tile(sa + 2048 + tid * 16, bt + 2048);  // columns 16..31 (rows 8..15)
        if (NT == 8) {                                                 // columns 32..63 (rows 16..31)
            const unsigned char* bt2 = src.tile2 + (size_t)G * WG_TILE;
            cp_async16_tile(sa + 4096 + tid * 16, bt2);
            cp_async16_tile(sa + 6144 + tid * 16, bt2 + 2048);
        }
    }
    typedef WgStage<NT, MT> St;
    if (WT) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
            cp_async16(sa + St::CODES + (tid + 128 * m) * 16, src.code[m] + (size_t)G * 512, true);
        // Runs of scales and biases side by side: run k (tile k / 2, biases if odd) at St::PARAMS + k·16 raw values.
#pragma unroll
        for (int i = 0; i < W::PARAM_COPIES; ++i)
            if (src.param[i])
                cp_async4(sa + St::PARAMS + (tid + 128 * i) * 4,
                          src.param[i] + (size_t)G * 16 * sizeof(typename S::raw), true);
    }
    if (X && src.xsum) cp_async4(sa + St::XSUMS + tid * 4, src.xsum + (size_t)G * 2, true);
}

// Where a block's walk goes after group G of residue r: the residue's next group, else the next residue's first.
__device__ __forceinline__ void wg_next(int& G, int& r, int nw, int groups) {
    G += nw;
    if (G >= groups) G = ++r;
}

// The ring's turn before group j of `jobs`: once this thread's copies of group j have landed and every warp is done
// with group j − 1's stage, that stage takes the copies STAGES − 1 groups ahead (issue(stage, G), the copies'
// cursor Gi, ri moving on).
template <int STAGES, typename Issue>
__device__ __forceinline__ void wg_ring_turn(int j, int jobs, int& Gi, int& ri, int nw, int groups, Issue issue) {
    cp_async_wait<STAGES - 2>();  // this thread's copies of group j have landed
#ifndef TF_EMU
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the tile is wgmma's (async proxy) to read
#endif
    __syncthreads();  // every thread's copies of group j are in; every warp is done with group j − 1's stage
    if (j + STAGES - 1 < jobs) {
        issue((j + STAGES - 1) % STAGES, Gi);
        wg_next(Gi, ri, nw, groups);
    }
    cp_async_commit();
}

// A block's end (project_wgmma_a4, project_wgmma_bf16): `tot` holds the sums of every residue (gridDim.y == 1) or
// `acc` this block's residue r0's (split), PER_THREAD floats a thread of partial sums; the residues' sums are added
// in order and the block's outputs written.
template <int NT, int MT, int PER_THREAD>
__device__ __forceinline__ void wg_finish(float (&tot)[MT][NT][2], const float (&acc)[MT][NT][2], bool split, int r0,
                                          int groups, int nw, float* __restrict__ partial, u32* __restrict__ tickets,
                                          int& last, float* __restrict__ y, int rows, int out, int tile0, int tiles) {
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, warp = tid >> 5;
    if (!split) {
        // Residues with no groups (nw > groups) add zeros, as the decode kernels' idle warps do.
        for (int rr = max(groups, 1); rr < nw; ++rr)
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 2; ++i) tot[m][nt][i] = tot[m][nt][i] + 0.0f;
    } else {
        // This block's sums: PER_THREAD floats a thread, as float2s (m, nt).
        constexpr int PER_BLOCK = 128 * PER_THREAD, NTS = PER_THREAD / (2 * MT);
        float2* mine = reinterpret_cast<float2*>(partial + ((size_t)r0 * gridDim.x + blockIdx.x) * PER_BLOCK) + tid;
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                __stcg(mine + (NTS * m + nt) * 128, make_float2(acc[m][nt][0], acc[m][nt][1]));
        __threadfence();  // the sums are visible device-wide before the ticket says so
        __syncthreads();
        if (tid == 0) {
            last = atomicAdd(&tickets[blockIdx.x], 1u) == (u32)nw - 1;
            if (last) tickets[blockIdx.x] = 0;  // every block of this launch has taken its ticket
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
        for (int rr = 0; rr < nw; ++rr) {
            const float2* theirs =
                reinterpret_cast<const float2*>(partial + ((size_t)rr * gridDim.x + blockIdx.x) * PER_BLOCK) + tid;
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const float2 p = __ldcg(theirs + (NTS * m + nt) * 128);
                    tot[m][nt][0] = rr == 0 ? p.x : tot[m][nt][0] + p.x;
                    tot[m][nt][1] = rr == 0 ? p.y : tot[m][nt][1] + p.y;
                }
        }
    }
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        const int tile = tile0 + 4 * m + warp;
        if (tile >= tiles) continue;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int row = nt * TILE_ROWS + t, oo = tile * MMA_OUT + g + 8 * i;
                if (row < rows && oo < out) y[(size_t)row * out + oo] = tot[m][nt][i];
            }
    }
}

// A warpgroup's 64·MT outputs (4·MT tiles, warp w owning tiles w, 4 + w, …) × up to 4·NT rows: those of part `part`
// (rows 32·part on; 0 but for the 64-column build).
// gridDim.y == 1: the block walks every residue's groups in the decode kernels' order and writes y.
// (The tickets and partial sums below are indexed by blockIdx.x, which tells a row part's blocks apart too.)
// gridDim.y == nw: block (x, r) walks residue r, leaves its sums in `partial`, and the last of the nw blocks to
// finish (a ticket each) adds them in residue order and writes y, then resets its ticket for the next launch.
// Either way each output's sum is the decode kernels' fold: residue r's groups in order, the residues' sums
// added in order.
template <typename S, int NT, int MT>
__device__ __forceinline__ void project_wgmma_a4(int blk, const u16* __restrict__ xh, const u16* __restrict__ xl,
                                                 const float* __restrict__ xs, const u32* __restrict__ codes,
                                                 const typename S::raw* __restrict__ scales,
                                                 const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                                 int rows, int out, int cols, int nw, const u32* __restrict__ b_tiles,
                                                 float* __restrict__ partial, u32* __restrict__ tickets, int part) {
    typedef WgStage<NT, MT> St;
    if (part > 0) {
        const int first = 32 * part;
        xs += (size_t)first * (cols / 32);
        y += (size_t)first * out;
        b_tiles += (size_t)(first / 16) * (cols / 64) * (WG_TILE / 4);  // x's tiles are row block major
        rows -= first;
    }
    constexpr int STAGES = NT == 8 ? WG_N64_STAGES : WG_STAGES;
    __shared__ __align__(1024) unsigned char ring[STAGES * St::BYTES];
    __shared__ int last;
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, warp = tid >> 5;
    const int tiles = (out + MMA_OUT - 1) / MMA_OUT, tile0 = blk * 4 * MT;
    const int groups = cols / 64;
    const bool split = gridDim.y > 1;
    // The walk: residue r0 alone (split) or every residue, as (G, r) cursors for the copies and the math.
    const int r0 = split ? (int)blockIdx.y : 0;
    const int jobs = split ? (r0 < groups ? (groups - 1 - r0) / nw + 1 : 0) : groups;
    const u32 mask = opaque_nibble_mask();
    // With TF_ZEROED_GROUPS the accumulators start each group at a +0 the compiler cannot see (told they are zero,
    // ptxas would drop them: HGMMA with scale-d off, which is what the default does, FRESH_GROUPS).
    const float zero = opaque_zero();
    const SmemAddr ring_at = smem_addr(ring);
    const unsigned char* btiles = reinterpret_cast<const unsigned char*>(b_tiles);
    (void)xh, (void)xl;  // x comes as b_tiles (prepare_store wrote them beside xh and xl)
    const WgSources<S, MT> src = wg_sources<S, NT, MT>(tile0, tiles, btiles, xs, codes, scales, biases, rows, cols, groups);
    int Gi = r0, ri = r0;  // the copies' cursor
    // The first STAGES − 1 groups' weights before the previous kernel is done, x's pieces after (project_stream.cu's
    // early copies; 16-row rounds 1-1.5% faster, call 174 on the H200); the first commit takes both.
    for (int s = 0, Ge = r0, re = r0; s < STAGES - 1; ++s) {
        if (s < jobs) {
            wg_issue<S, NT, MT, false, true>(ring + s * St::BYTES, Ge, src);
            wg_next(Ge, re, nw, groups);
        }
    }
    kernel_entry();
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < jobs) {
            wg_issue<S, NT, MT, true, false>(ring + s * St::BYTES, Gi, src);
            wg_next(Gi, ri, nw, groups);
        }
        cp_async_commit();
    }
    float tot[MT][NT][2], acc[MT][NT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) tot[m][nt][0] = tot[m][nt][1] = acc[m][nt][0] = acc[m][nt][1] = 0.0f;
    int G = r0, r = r0;  // the math's cursor
    for (int j = 0; j < jobs; ++j) {
        wg_ring_turn<STAGES>(j, jobs, Gi, ri, nw, groups,
                             [&](int stage, int Gn) { wg_issue<S, NT, MT>(ring + stage * St::BYTES, Gn, src); });
        unsigned char* st = ring + (j % STAGES) * St::BYTES;
        // Step q = 2j + h of m64 block m: project_stream's mma_bf16(pg[2h], pg8[2h], pg[2h + 1], pg8[2h + 1]).
        u32 a[MT][4][4];
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const unsigned char* cw = st + St::CODES + (4 * m + warp) * 512;
            const uint2 cg = *reinterpret_cast<const uint2*>(cw + g * 32 + t * 8);
            const uint2 cg8 = *reinterpret_cast<const uint2*>(cw + (g + 8) * 32 + t * 8);
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                u32 pg[4], pg8[4];
                pairs_a4_masked(jj ? cg.y : cg.x, mask, pg);
                pairs_a4_masked(jj ? cg8.y : cg8.x, mask, pg8);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    a[m][2 * jj + h][0] = pg[2 * h];
                    a[m][2 * jj + h][1] = pg8[2 * h];
                    a[m][2 * jj + h][2] = pg[2 * h + 1];
                    a[m][2 * jj + h][3] = pg8[2 * h + 1];
                }
            }
        }
        float d[MT][NT][4];
        constexpr bool FRESH = FRESH_GROUPS;  // the first step takes no C: d is not zeroed (wg_group_mma)
        if (!FRESH) {
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int k = 0; k < 4; ++k) d[m][nt][k] = zero;
        }
        wg_group_mma<NT, MT, FRESH>(d, a, st, ring_at + (j % STAGES) * St::BYTES);
        // project_stream_a4's group end: x's group sums, the scale and centred bias fmas.
        const float* xsum = reinterpret_cast<const float*>(st + St::XSUMS);
        float sx[NT];  // row nt·TILE_ROWS + t's sum over the group
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int xr = min(nt * TILE_ROWS + t, St::ROWS - 1);
            sx[nt] = 0.0f;
            sx[nt] += xsum[2 * xr];
            sx[nt] += xsum[2 * xr + 1];
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const typename S::raw* pr = reinterpret_cast<const typename S::raw*>(st + St::PARAMS) + (4 * m + warp) * 32;
            const float s0 = S::get(pr[g]), s8 = S::get(pr[g + 8]);
            const float sb[4] = {s0, centred_bias(s0, S::get(pr[16 + g])), s8,
                                 centred_bias(s8, S::get(pr[24 + g]))};
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const HiLo v = hi_plus_lo(d[m][nt]);
                acc[m][nt][0] = fmaf(sb[1], sx[nt], fmaf(sb[0], v.g, acc[m][nt][0]));
                acc[m][nt][1] = fmaf(sb[3], sx[nt], fmaf(sb[2], v.g8, acc[m][nt][1]));
            }
        }
        const int rj = r;
        wg_next(G, r, nw, groups);
        if (!split && r != rj) {
            // Residue rj is done: the decode finish adds warp rj's sums after warp rj − 1's.
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        tot[m][nt][i] = rj == 0 ? acc[m][nt][i] : tot[m][nt][i] + acc[m][nt][i];
                        acc[m][nt][i] = 0.0f;
                    }
        }
    }
    cp_async_wait<0>();
    wg_finish<NT, MT, St::PER_THREAD>(tot, acc, split, r0, groups, nw, partial, tickets, last, y, rows, out, tile0,
                                      tiles);
}

// Each kernel projects x by up to four matrices of 4-bit g64 weights sharing it (qkv, z, b and a; q, k and v; gate
// and up), as the weight stream's kernels do: blocks from start1 on belong to the second matrix, from start2 to the
// third, from start3 to the fourth (INT_MAX: no such matrix), each with the blocks it has alone, so each output
// gets the bits of its own launch. Tickets and partial sums are indexed by the launch's block, so split launches
// share them too.
// Blocks an SM each build is held to (registers): 4 with two m64 blocks, 5 with one; the 64-column build (32
// accumulators a tile) WG_N64_BLOCKS: at 5, 94 registers, but its f16-scale kernel spills 72 bytes.
#ifndef WG_N64_BLOCKS
#define WG_N64_BLOCKS 5
#endif
#define WG_MIN_BLOCKS(NT, MT) (NT == 8 ? WG_N64_BLOCKS : MT == 1 ? 5 : 4)
#define WGMMA_A4(NAME, S, NT, MT, SUF)                                                                            \
    extern "C" __global__ void __launch_bounds__(128, WG_MIN_BLOCKS(NT, MT)) project_wgmma_a4_g2_##NAME##SUF(     \
        const u16* xh, const u16* xl, const float* xs, A4_JOB(S, 0), A4_JOB(S, 1), int start1, A4_JOB(S, 2),      \
        int start2, A4_JOB(S, 3), int start3, int rows, int cols, int nw, const u32* b_tiles, float* partial,     \
        u32* tickets) {                                                                                           \
        entry_after_weights(); /* the wait: in project_wgmma_a4, after its first weights */                       \
        const int parts = NT == 8 ? (rows + 31) / 32 : 1; /* blocks an output block: its parts of 32 rows */      \
        const int ob = (int)blockIdx.x / parts, part = (int)blockIdx.x - ob * parts;                              \
        const int j = job_of_block(ob, start1, start2, start3);                                                   \
        project_wgmma_a4<S, NT, MT>(ob - job_pick(j, 0, start1, start2, start3), xh, xl, xs,                      \
                                    job_pick(j, codes0, codes1, codes2, codes3),                                  \
                                    job_pick(j, scales0, scales1, scales2, scales3),                              \
                                    job_pick(j, biases0, biases1, biases2, biases3), job_pick(j, y0, y1, y2, y3), \
                                    rows, job_pick(j, out0, out1, out2, out3), cols, nw, b_tiles, partial,        \
                                    tickets, part);                                                               \
    }
#define WGMMA_A4_ALL(NT, MT, SUF) \
    WGMMA_A4(f32, F32T, NT, MT, SUF) WGMMA_A4(f16, F16T, NT, MT, SUF) WGMMA_A4(bf16, BF16T, NT, MT, SUF)
WGMMA_A4_ALL(4, 2, )
WGMMA_A4_ALL(2, 2, _n16)
WGMMA_A4_ALL(4, 1, _m1)
WGMMA_A4_ALL(2, 1, _n16_m1)
WGMMA_A4_ALL(8, 1, _n64)
