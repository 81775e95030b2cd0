// project_stream.cu: the MLX 4-bit tensor-core projection of project_mma.cu with its weight stream pipelined:
// each warp copies the codes, scales and biases of its next groups into shared memory with cp.async, D − 1
// groups ahead of the one it computes, so many bytes are in flight per warp without holding them in registers
// (project_mma.cu's warps wait a whole memory latency for every group; that is what held decode to ~0.9 TB/s).
//
// Arithmetic: exactly project_mma_a4's (the same groups per warp in the same order, the same mma sequence, x
// read as there, the same warp-order finish), so both kernels give the same bits and the row invariance argued
// in project_mma.cu carries over unchanged. Only where the weight bytes wait before the mma differs.


// The copies past a warp's last group zero-fill instead of reading memory (project_stream_a4's group(); timed in
// BENCHMARKS.md §7, calls 183-184). -DTF_STREAM_READ_PAST (TENSORFOLD_CUDA_DEFINES) builds the unconditional copies
// that read, for same-run comparisons; the bits never depend on it.
#ifdef TF_STREAM_READ_PAST
#define STREAM_ZFILL false
#else
#define STREAM_ZFILL true
#endif

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
    emu_cp_async(dst, src, 16, valid);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
#endif
}

// 4 bytes global → shared (through L1: a block's warps read neighbouring scales); zero-filled when !valid.
__device__ __forceinline__ void cp_async4(SmemAddr dst, const void* src, bool valid) {
#ifdef TF_EMU
    emu_cp_async(dst, src, 4, valid);
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifdef TF_EMU
    emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef TF_EMU
    emu_cp_async_wait(N);
#else
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

// pairs_a4 (project_mma.cu) with the mask in a register: the same four exact centred bf16 pairs.
__device__ __forceinline__ void pairs_a4_masked(u32 q, u32 mask, u32 (&p)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#ifdef TF_EMU
        const u32 v = ((q >> (4 * i)) & mask) | 0x43004300u;
#else
        u32 v;
        asm("lop3.b32 %0, %1, %2, 0x43004300, 0xEA;" : "=r"(v) : "r"(q >> (4 * i)), "r"(mask));
#endif
        p[i] = centre_codes(v);
    }
}

// One pipeline stage of a warp, for MT tiles of 16 outputs: the codes of its 16·MT outputs for one group (output
// row r at r·16·WPL bytes: tile m's run of the tile-major codes at m·256·WPL), then per tile m its 16 scales and
// 16 biases (32 raw values at CODE_BYTES + m·32·sizeof(raw); 128 bytes a tile are kept, the most a raw needs).
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

// Threads a block of a kernel with NW warps (0: up to stream_warps) is launched with, at most.
template <int WPL, int D, int MT, int NW>
__host__ __device__ constexpr int stream_threads() {
    return 32 * (NW ? NW : stream_warps<WPL, D, MT>());
}

// The blocks an SM must hold (launch bounds; 0 leaves it to ptxas), by the group words WPL, row tiles NT and output
// tiles MT of a block, each the faster of two measured (calls 52 and 54, 27B MLX4): where a block takes at most 2
// tiles of groups of up to 64, 1 (the 1-row kernel then takes 64 registers instead of 58, and 1-row rounds ran
// 7.01 ms against 7.29); at 4 tiles, none (told 1 block, the 16-row kernel took 96 registers instead of 80, 2
// blocks an SM instead of 3, and 16-row rounds ran 18.7 ms against 15.8); at 8 (the largest rounds'), 2 (left
// alone, 134 registers, 1 block). Groups of 128 keep ptxas's choice (not measured). The kernels of NW fixed warps
// ask for TF_W8_BLOCKS blocks of 8 warps (below): their unrolled loop took 116 registers when told 1 block.
template <int WPL, int NT, int MT>
__host__ __device__ constexpr int stream_min_blocks() {
    return NT * MT >= 8 ? 2 : NT * MT <= 2 && WPL <= 2 ? 1 : 0;
}

// A lane's share of the copies of its warp's groups, in order: per 16-byte chunk of codes its next source, and
// for lanes below MT·PCH one 16-byte chunk of a tile's scales or biases; each `issue` copies one group and steps
// to the warp's next (nw groups on). Tiles past the last read the last tile (valid addresses, no per-copy
// predicate): their results are never written (finish_tiles), and an mma's output row depends on its own A row.
template <int WPL, int MT, typename S>
struct StreamCopies {
    static constexpr int CPL = StreamStage<WPL, MT>::CPL;
    static constexpr int TB = 256 * WPL;                            // bytes of one tile's codes for one group
    static constexpr int PCH = 2 * (int)sizeof(typename S::raw);  // 16-byte chunks of a tile's scales + biases
    const unsigned char* src[CPL];
    const unsigned char* psrc;
    int step, pstep;  // bytes from one of the warp's groups to its next, in the codes and in the parameters

    __device__ __forceinline__ void init(const u32* codes, const typename S::raw* scales,
                                         const typename S::raw* biases, int tile0, int tiles, int groups, int G0,
                                         int nw) {
        const int lane = threadIdx.x & 31;
        step = nw * TB;
#pragma unroll
        for (int k = 0; k < CPL; ++k) {
            const int c = lane + 32 * k, tl = min(tile0 + c / (16 * WPL), tiles - 1);
            src[k] = reinterpret_cast<const unsigned char*>(codes) + ((size_t)tl * groups + G0) * TB +
                     (c % (16 * WPL)) * 16;
        }
        constexpr int HALF = PCH / 2;
        const int m = min(lane / PCH, MT - 1), q = lane % PCH, tl = min(tile0 + m, tiles - 1);
        const unsigned char* base = reinterpret_cast<const unsigned char*>(q < HALF ? scales : biases);
        psrc = base + ((size_t)tl * groups + G0) * 16 * sizeof(typename S::raw) + (q % HALF) * 16;
        pstep = nw * 16 * (int)sizeof(typename S::raw);
    }

    // Copies the warp's next group into the stage at `stage`; zero-fills it instead, reading nothing, when `valid`
    // is false (a group past the warp's last).
    __device__ __forceinline__ void issue(SmemAddr stage, bool valid = true) {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int k = 0; k < CPL; ++k)
            if (lane + 32 * k < StreamStage<WPL, MT>::CHUNKS) {
                cp_async16(stage + (lane + 32 * k) * 16, src[k], valid);
                src[k] += step;
            }
        if (lane < MT * PCH) cp_async16(stage + StreamStage<WPL, MT>::CODE_BYTES + lane * 16, psrc, valid);
        psrc += pstep;
    }
};

// MLX 4-bit codes, group gs = 32·WPL, tile-major (common.cu a4_tile_code); a block owns MT tiles of 16 outputs
// (each warp computes all of them for its groups, so x is read once per MT tiles); D pipeline stages per warp
// (D − 1 in flight); NW warps a block, or blockDim's when 0. With NW known, the steps from one of a warp's groups
// to its next are constants, and the loop (unrolled by D) takes them as address offsets: 88 instructions a group in
// the 1-row kernel, against 96 unrolled with the warps read at run time and 104 not unrolled (cuobjdump, BENCHMARKS.md §7).
template <int NT, int WPL, typename S, int D, int MT, int NW>
__device__ __forceinline__ void project_stream_a4(int tile, const u16* __restrict__ xh, const u16* __restrict__ xl,
                                                  const float* __restrict__ xs, const u32* __restrict__ codes,
                                                  const typename S::raw* __restrict__ scales,
                                                  const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                                  int rows, int out, int cols, int early) {
    constexpr int GS = 32 * WPL, SB = StreamStage<WPL, MT>::BYTES;
    constexpr int W = NW ? NW : stream_warps<WPL, D, MT>();  // stages for NW warps only: 21 KB, not 41
    constexpr int PIPE = W * D * SB, RED = W * NT * 64 * 4;
    __shared__ __align__(16) unsigned char smem[PIPE > RED ? PIPE : RED];
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int warp = threadIdx.x >> 5, nw = NW ? NW : blockDim.x >> 5;
    const int ob = tile * (MMA_OUT * MT), rt0 = row_block() * NT;
    unsigned char* pipe = smem + warp * D * SB;
    int xrow[NT];
    // Rows past the last read the last row's x (valid addresses, no predicates in the loop): an mma's output
    // column depends on its own B column only, and finish_tiles never writes those columns.
    tile_rows<NT>(xrow, rt0, rows);
    int crow[NT];  // the C fragment's row (t of each tile), for x's group sums
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        if (xrow[nt] < 0) xrow[nt] = rows - 1;
        crow[nt] = min((rt0 + nt) * TILE_ROWS + t, rows - 1);
    }
    const int groups = cols / GS, chunks = cols / 32;
    const u32 mask = opaque_nibble_mask();
    // This warp's groups: warp, warp + nw, … (project_mma_a4's split), n of them. Every pointer below starts at
    // the warp's first group and steps nw groups at a time.
    const int n = warp < groups ? (groups - warp + nw - 1) / nw : 0;
    StreamCopies<WPL, MT, S> cp;
    cp.init(codes, scales, biases, tile * MT, (out + MMA_OUT - 1) / MMA_OUT, groups, warp, nw);
    const SmemAddr pipe_s = smem_addr(pipe);
    // x's half (lane_half) at this lane's first word of the group, and x's 32-column sums at the group's first.
    const u16* xpp[NT];
    const float* xsp[NT];
    const u16* xp = lane_half(xh, xl);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        xpp[nt] = xp + (size_t)xrow[nt] * cols + ((size_t)warp * (GS / 8) + t * WPL) * 8;
        xsp[nt] = xs + (size_t)crow[nt] * chunks + (size_t)warp * WPL;
    }
    const int x_step = nw * GS, xs_step = nw * WPL;
    // The first D − 1 stages read weights only, so they may be copied before the predecessor is done (`early`):
    // a block scheduled during the previous kernel's tail then starts computing as soon as x is ready, where it
    // used to wait a memory latency first (3% faster 27B decode, call 45; asking L2 for more of the tile's bytes
    // at the same time, cp.async.bulk.prefetch.L2, made it slower).
    if (!early) kernel_entry();
#pragma unroll
    for (int s = 0; s < D - 1; ++s) {
        if (s < n) cp.issue(pipe_s + s * SB);
        cp_async_commit();
    }
    if (early) kernel_entry();
    float acc[MT][NT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) acc[m][nt][0] = acc[m][nt][1] = 0.0f;
    // Group i of the warp's: waits for it in stage `rd`, copies group i + D − 1 into stage `wr`, and adds the
    // group's products to acc. The loop below passes stage numbers known at compile time (it is unrolled by D),
    // so every shared-memory address is a register plus a constant: with i % D worked out at run time, the stage
    // arithmetic took 10 of the loop's 104 instructions a group (BENCHMARKS.md §7).
    // `more`: whether group i + D − 1 is one of the warp's (taken as true under TF_STREAM_READ_PAST).
    auto group = [&](int rd, int wr, bool more) {
        cp_async_wait<D - 2>();  // group i has landed (for this lane) ...
        __syncwarp();            // ... and for every lane; the slot of group i − 1 is free
        // Unconditional: the last D − 1 issues go past the warp's groups into stages never read; no branch keeps
        // the loop short. They zero-fill and read nothing, at the cost of a compare a group: when they read (the
        // next tile's first groups, or the padding ops.rs puts after every tile-major array so those reads stay in
        // bounds; TF_STREAM_READ_PAST), the block's last wait waited for bytes nobody uses. The bits are the same
        // either way: those stages are never read.
        cp.issue(pipe_s + wr * SB, STREAM_ZFILL ? more : true);
        cp_async_commit();
        const unsigned char* st = pipe + rd * SB;
        const u32* cw = reinterpret_cast<const u32*>(st);
        const unsigned char* sbw = st + StreamStage<WPL, MT>::CODE_BYTES;
        // x's group sums, shared by the MT tiles.
        float sx[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            sx[nt] = 0.0f;
#pragma unroll
            for (int k = 0; k < WPL; ++k) sx[nt] += xsp[nt][k];
            xsp[nt] += xs_step;
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
            uint4 b[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) b[nt] = *reinterpret_cast<const uint4*>(xpp[nt] + j * 8);
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                u32 pg[4], pg8[4];
                pairs_a4_masked(cw[(m * 16 + g) * 4 * WPL + t * WPL + j], mask, pg);
                pairs_a4_masked(cw[(m * 16 + g + 8) * 4 * WPL + t * WPL + j], mask, pg8);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    mma_bf16(d[m][nt], pg[0], pg8[0], pg[1], pg8[1], b[nt].x, b[nt].y);
                    mma_bf16(d[m][nt], pg[2], pg8[2], pg[3], pg8[3], b[nt].z, b[nt].w);
                }
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) xpp[nt] += x_step;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            // Outputs past `out` read padding or a clamped tile here: their results are never written.
            const typename S::raw* ps =
                reinterpret_cast<const typename S::raw*>(sbw + m * 32 * (int)sizeof(typename S::raw));
            const float s0 = S::get(ps[g]), s8 = S::get(ps[g + 8]);
            const float sb[4] = {s0, centred_bias(s0, S::get(ps[16 + g])), s8, centred_bias(s8, S::get(ps[24 + g]))};
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const HiLo v = hi_plus_lo(d[m][nt]);
                acc[m][nt][0] = fmaf(sb[1], sx[nt], fmaf(sb[0], v.g, acc[m][nt][0]));
                acc[m][nt][1] = fmaf(sb[3], sx[nt], fmaf(sb[2], v.g8, acc[m][nt][1]));
            }
        }
    };
    // Group i sits in stage i % D. With NW fixed and one output tile a block: D groups a trip, then the last n % D.
    // Otherwise one group a trip, the stages worked out at run time: unrolled, the 27B's 16-row rounds (two tiles
    // a block) took 15.0 ms against 14.3, and its 1-row rounds with the warps read at run time 7.24 ms against
    // 6.81 (call 79).
    if constexpr (NW != 0 && MT == 1) {
        int i = 0;
        for (; i + D <= n; i += D) {
#pragma unroll
            for (int s = 0; s < D; ++s) group(s, (s + D - 1) % D, i + s + D - 1 < n);
        }
#pragma unroll
        for (int s = 0; s < D - 1; ++s)
            if (i + s < n) group(s, (s + D - 1) % D, i + s + D - 1 < n);
    } else {
        for (int i = 0; i < n; ++i) group((unsigned)i % D, (unsigned)(i + D - 1) % D, i + D - 1 < n);
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with its stages before they become the reduction's scratch
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        finish_tiles<NT>(acc[m], y, rows, out, ob + m * 16, rt0, reinterpret_cast<float*>(smem));
        __syncthreads();  // the scratch is read in full before the next tile writes it
    }
}

// Blocks an SM the fixed-warp kernels of one row tile ask for: 5, which ptxas meets with 48 registers and no spill
// (their loop does not need 64). Call 86, three alternating runs each: 27B MLX4 decode 150.8, 149.2, 150.7 tok/s
// against 146.3, 145.6, 146.5 with 4 blocks (64 registers), and 149.0, 148.7, 148.4 with 6 (40 registers); Nsight:
// the gate/up launch gains most (46.0 → 44.2 µs), the 320-block down projection loses a little (27.3 → 28.2).
// Those of 2 row tiles keep 64 registers, 4 blocks of 8 warps (at 48 they spill). -DTF_W8_BLOCKS=n
// (TENSORFOLD_CUDA_DEFINES) rebuilds the one-tile kernels for n, for same-run comparisons; the bits never depend on
// it.
#ifndef TF_W8_BLOCKS
#define TF_W8_BLOCKS 5
#endif

// Each kernel projects x by up to four matrices of one kernel family and column count that share it (qkv, z, b
// and a; q, k and v; gate and up): tiles from start1 on (tile_block) belong to the second matrix, from start2 to
// the third, from start3 to the fourth (INT_MAX: no such matrix), each with the tiles it has alone, so each output
// gets the bits of its own launch (a launch costs ~5 µs of a decode round however small its matrix:
// BENCHMARKS.md §7).
#define STREAM_A4(NT, WPL, NAME, S, D, MT, NW, SUF)                                                              \
    extern "C" __global__ void __launch_bounds__(                                                               \
        stream_threads<WPL, D, MT, NW>(),                                                                       \
        NW ? (NT == 1 ? TF_W8_BLOCKS : 65536 / (64 * 32 * NW)) : stream_min_blocks<WPL, NT, MT>())              \
        project_stream_a4_g##WPL##_##NAME##_nt##NT##_s##D##_m##MT##SUF(                                           \
            const u16* xh, const u16* xl, const float* xs, A4_JOB(S, 0), A4_JOB(S, 1), int start1, A4_JOB(S, 2), \
            int start2, A4_JOB(S, 3), int start3, int rows, int cols, int early, L2_AHEAD_ARGS) {                \
        entry_after_weights();                                                                                   \
        const int j = job_of(start1, start2, start3);                                                            \
        project_stream_a4<NT, WPL, S, D, MT, NW>(tile_block() - job_pick(j, 0, start1, start2, start3), xh, xl,  \
                                                 xs, job_pick(j, codes0, codes1, codes2, codes3),                \
                                                 job_pick(j, scales0, scales1, scales2, scales3),                \
                                                 job_pick(j, biases0, biases1, biases2, biases3),                \
                                                 job_pick(j, y0, y1, y2, y3), rows,                              \
                                                 job_pick(j, out0, out1, out2, out3), cols, early);              \
        L2_AHEAD();                                                                                              \
    }
#define STREAM_A4_NT(WPL, NAME, S, D, MT, NW, SUF)                                             \
    STREAM_A4(1, WPL, NAME, S, D, MT, NW, SUF) STREAM_A4(2, WPL, NAME, S, D, MT, NW, SUF) \
        STREAM_A4(4, WPL, NAME, S, D, MT, NW, SUF)
#define STREAM_A4_ALL(WPL, D, MT, NW, SUF)                                                   \
    STREAM_A4_NT(WPL, f32, F32T, D, MT, NW, SUF) STREAM_A4_NT(WPL, f16, F16T, D, MT, NW, SUF) \
        STREAM_A4_NT(WPL, bf16, BF16T, D, MT, NW, SUF)
// Shared memory per block: 8 or 16 warps × D stages × MT·(256·WPL + 128) bytes, within 48 KB of static shared memory.
STREAM_A4_ALL(1, 4, 1, 0, )
STREAM_A4_ALL(2, 4, 1, 0, )
STREAM_A4_ALL(4, 4, 1, 0, )
STREAM_A4_ALL(1, 8, 1, 0, )
STREAM_A4_ALL(2, 8, 1, 0, )
STREAM_A4_ALL(1, 4, 2, 0, )
STREAM_A4_ALL(2, 4, 2, 0, )
// The default layout of up to 8 rows for groups of 64 with 8 warps (every large matrix of the published shapes),
// NW fixed: project.rs stream_fixed_warps names it.
STREAM_A4_ALL(2, 4, 1, 8, _w8)
