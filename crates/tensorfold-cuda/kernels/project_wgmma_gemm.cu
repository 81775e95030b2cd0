// project_wgmma_gemm.cu: prompt chunks of bf16 weights (project_gemm.rs says which calls) on Hopper's warpgroup
// mma, m64n128k16, with the bits project_gemm_bf16 and the decode kernels give every output.
//
// Why the bits match: as in project_gemm.cu, a block walks the column groups residue by residue (0, nw, 2nw, …,
// then 1, nw + 1, …). Each residue's chain is a decode warp's: one accumulator from +0 through the residue's
// groups, four k16 steps a group with project_stream's A fragments (pairs_bf16) and x's words where mma.sync's
// lanes would feed them (x's B tiles, project_mma.cu wg_tile_at); wgmma gives a chain of mma.sync m16n8k16 bit for
// bit when each k16 step holds the same operands in the same slots (call 93). At a residue's end each row's value
// is hi + lo, and total = p0, total += p1, … in residue order (the decode finish's order).
//
// Why it is faster than project_gemm_bf16 (27B bf16 16k prefill 1,927 against 1,700 tok/s, call 115): one
// wgmma does a warpgroup's 64 outputs × 128 B columns × 16 k from shared memory, where mma.sync needs every warp
// to load B fragments itself; a block's B (64 rows) serves WGS warpgroups' outputs.
//
// Each group's wgmmas are waited for before the next group's A fragments are loaded. On the H200 a wgmma reads its
// A registers while it runs, yet ptxas reuses them for the next group's loads once the wgmma is issued: with the
// wait after the next group's loads instead, every output was wrong (call 115; the CPU emulator, which runs a wgmma
// at once, cannot see it). The other warpgroups' wgmmas fill the tensor cores meanwhile.
//
// Tiles: a block is WGS warpgroups over 64·WGS outputs × 64 rows (128 B columns, TILE_ROWS rows an n-tile, hi and
// lo side by side); warp i of warpgroup w owns outputs 64w + 16i … + 15 (one m16 slice of the m64). A stage holds one
// group's B tiles for the block's rows (x's tiles of 16 rows are 4,096 bytes a group, row block major: prepare_store;
// the block's four side by side make one B operand of 128 columns, 1,024 bytes between 8-column core matrices) and
// the group's weights of the block's outputs (128 bytes an output, neighbouring 16-byte chunks swapped on odd
// outputs so a quarter warp's loads hit distinct banks). Copies run D − 1 groups ahead.

#define GWG_ROWS 64     // rows a block (128 B columns)
#define GWG_NT 16       // n-tiles of 8 B columns
#define GWG_B 16384     // bytes of one group's B tiles for the block's rows (4 tiles of 16 rows)

// One stage in dynamic shared memory: the B tiles, then the weights (host mirror: project_gemm.rs).
template <int WGS>
struct GwgStage {
    static constexpr int OUTS = 64 * WGS;               // outputs a block
    static constexpr int BYTES = GWG_B + OUTS * 128;    // B tiles, then 64 bf16 weights an output
    static constexpr int THREADS = 128 * WGS;
};

// Copies group G's B tiles of row blocks q0 … q0 + 3 (of nq; past the last, the last again: those columns are never
// written) and its weights of outputs ob … (past the last output, the last again) into stage `st`.
template <int WGS>
__device__ __forceinline__ void gwg_issue(SmemAddr st, int G, const unsigned char* __restrict__ bt,
                                          const u16* __restrict__ w, int q0, int nq, int ob, int out, int cols,
                                          int groups) {
    typedef GwgStage<WGS> St;
    constexpr int T = St::THREADS, BC = GWG_B / 16, AC = St::OUTS * 8;
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < (BC + T - 1) / T; ++i) {
        const int c = tid + i * T;
        if (BC % T == 0 || c < BC) {
            const int q = min(q0 + (c >> 8), nq - 1);
            cp_async16(st + c * 16, bt + ((size_t)q * groups + G) * WG_TILE + (c & 255) * 16, true);
        }
    }
#pragma unroll
    for (int i = 0; i < AC / T; ++i) {
        const int c = tid + i * T, o = c >> 3, k = c & 7;
        const u16* src = w + (size_t)min(ob + o, out - 1) * cols + (size_t)G * 64 + k * 8;
        cp_async16(st + GWG_B + o * 128 + ((k ^ (o & 1)) * 16), src, true);
    }
}

// d += A·B for one group's four k16 steps: a[q] the A fragment of step q, the B operand at `bt` (`bts` its shared
// address), 128 columns. Committed as one wgmma group; not waited for here.
__device__ __forceinline__ void gwg_group_mma(float (&d)[GWG_NT][4], u32 (&a)[4][4], const unsigned char* bt,
                                              SmemAddr bts) {
#ifdef TF_EMU
    // The emulator feeds each n-tile to its mma.sync model with the B words mma.sync's lanes would hold.
    (void)bts;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int q = 0; q < 4; ++q)
        for (int nt = 0; nt < GWG_NT; ++nt) {
            const unsigned char* s = bt + q * WG_STEP;
            const u32 b0 = *reinterpret_cast<const u32*>(s + wg_b_at(nt * 8 + g, 2 * t));
            const u32 b1 = *reinterpret_cast<const u32*>(s + wg_b_at(nt * 8 + g, 2 * t + 8));
            emu_mma_bf16(d[nt], a[q][0], a[q][1], a[q][2], a[q][3], b0, b1);
        }
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
    (void)bt;
    // The A fragments are pinned before the fence: the compiler must not move their making past it.
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int k = 0; k < 4; ++k) asm volatile("" : "+r"(a[q][k])::"memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#define GWG_D(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const u64 desc = wg_desc(bts + q * WG_STEP);
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
            "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
            "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
            : GWG_D(0), GWG_D(1), GWG_D(2), GWG_D(3), GWG_D(4), GWG_D(5), GWG_D(6), GWG_D(7), GWG_D(8), GWG_D(9),
              GWG_D(10), GWG_D(11), GWG_D(12), GWG_D(13), GWG_D(14), GWG_D(15)
            : "r"(a[q][0]), "r"(a[q][1]), "r"(a[q][2]), "r"(a[q][3]), "l"(desc)
            : "memory");
    }
#undef GWG_D
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
    (void)d; (void)a; (void)bt; (void)bts;
    __trap();
#endif
}

// Waits until this warpgroup's committed wgmmas have finished; when the accumulators are to be read (`read`) they
// are pinned after the wait, so nothing reads them before it.
__device__ __forceinline__ void gwg_wait(float (&d)[GWG_NT][4], bool read) {
#if !defined(TF_EMU) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (read)
#pragma unroll
        for (int nt = 0; nt < GWG_NT; ++nt)
#pragma unroll
            for (int k = 0; k < 4; ++k) asm volatile("" : "+f"(d[nt][k])::"memory");
#else
    (void)d, (void)read;
#endif
}

// The walk of one block: its place and the copies' cursor (Gi, ri; the math walks residue by residue itself).
struct GwgWalk {
    int q0, nq, ob, groups, nw;
    int Gi, ri;
};

// Group j of the walk (of jobs): refill the stage group j − 1 read, load this group's A fragments, issue its
// wgmmas and wait for them.
template <int WGS, int D>
__device__ __forceinline__ void gwg_group(int j, int jobs, GwgWalk& k, unsigned char* smem, SmemAddr smem_s,
                                          const unsigned char* __restrict__ bt, const u16* __restrict__ w, int out,
                                          int cols, float (&d)[GWG_NT][4]) {
    typedef GwgStage<WGS> St;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    cp_async_wait<D - 2>();  // this thread's copies of group j have landed
#ifndef TF_EMU
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the B tiles are wgmma's (async proxy) to read
#endif
    __syncthreads();  // every thread's copies of group j are in; every warpgroup is done with group j − 1's stage
    if (j + D - 1 < jobs) {
        gwg_issue<WGS>(smem_s + ((unsigned)(j + D - 1) % D) * St::BYTES, k.Gi, bt, w, k.q0, k.nq, k.ob, out, cols,
                       k.groups);
        k.Gi += k.nw;
        if (k.Gi >= k.groups) k.Gi = ++k.ri;
    }
    cp_async_commit();
    const unsigned st = ((unsigned)j % D) * St::BYTES;
    // Step q = 2jj + h: project_stream's mma_bf16(pg[2h], pg8[2h], pg[2h + 1], pg8[2h + 1]) of word 2t + jj.
    const unsigned char* wa = smem + st + GWG_B + (16 * warp + g) * 128;
    u32 a[4][4];
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
        const int at = ((2 * t + jj) ^ (g & 1)) * 16;  // outputs o and o + 8 have g's parity
        u32 pg[4], pg8[4];
        pairs_bf16(*reinterpret_cast<const uint4*>(wa + at), pg);
        pairs_bf16(*reinterpret_cast<const uint4*>(wa + 8 * 128 + at), pg8);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            a[2 * jj + h][0] = pg[2 * h];
            a[2 * jj + h][1] = pg8[2 * h];
            a[2 * jj + h][2] = pg[2 * h + 1];
            a[2 * jj + h][3] = pg8[2 * h + 1];
        }
    }
    gwg_group_mma(d, a, smem + st, smem_s + st);
    gwg_wait(d, false);  // before anything may reuse the A registers (see the top of the file)
}

// y = x Wᵀ for bf16 weights w [out, cols] (cols % 64 == 0), x as its B tiles (b_tiles); D stages (≥ 2).
template <int WGS, int D>
__device__ __forceinline__ void project_wgmma_gemm(const u16* __restrict__ w, float* __restrict__ y, int rows,
                                                   int out, int cols, int nw, const u32* __restrict__ b_tiles) {
    typedef GwgStage<WGS> St;
    DYNAMIC_SMEM(smem);
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    int tile, rb;
    gemm_block<false>(tile, rb);
    GwgWalk k;
    k.q0 = rb * (GWG_ROWS / 16);
    k.nq = (rows + 15) / 16;
    k.ob = tile * St::OUTS;
    k.groups = cols / 64;
    k.nw = nw;
    k.Gi = k.ri = 0;
    const int jobs = k.groups;
    const unsigned char* bt = reinterpret_cast<const unsigned char*>(b_tiles);
    const SmemAddr smem_s = smem_addr(smem);
#pragma unroll
    for (int s = 0; s < D - 1; ++s) {
        if (s < jobs) {
            gwg_issue<WGS>(smem_s + s * St::BYTES, k.Gi, bt, w, k.q0, k.nq, k.ob, out, cols, k.groups);
            k.Gi += k.nw;
            if (k.Gi >= k.groups) k.Gi = ++k.ri;
        }
        cp_async_commit();
    }
    // Each residue's chain starts at a +0 the compiler cannot see: told it is zero, ptxas drops it (wgmma with
    // scale-d off, D = A·B), where the decode kernels' mma.sync adds its C of +0 (which differs when A·B is −0).
    const float zero = opaque_zero();
    float d[GWG_NT][4], tot[GWG_NT][2];
#pragma unroll
    for (int nt = 0; nt < GWG_NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) d[nt][i] = zero;
        tot[nt][0] = tot[nt][1] = 0.0f;
    }
    int j = 0;
    for (int r = 0; r < min(nw, k.groups); ++r) {
        // Residue r's groups r, r + nw, …: one chain.
        for (int G = r; G < k.groups; G += nw) gwg_group<WGS, D>(j++, jobs, k, smem, smem_s, bt, w, out, cols, d);
        gwg_wait(d, true);  // (a no-op: the last group was waited for) pins the accumulators for the reads below
        // The decode finish adds warp r's sums after warp r − 1's.
#pragma unroll
        for (int nt = 0; nt < GWG_NT; ++nt) {
            const HiLo v = hi_plus_lo(d[nt]);
            tot[nt][0] = r == 0 ? v.g : tot[nt][0] + v.g;
            tot[nt][1] = r == 0 ? v.g8 : tot[nt][1] + v.g8;
#pragma unroll
            for (int i = 0; i < 4; ++i) d[nt][i] = zero;
        }
    }
    cp_async_wait<0>();
    // Decode warps past the last group add their zero sums (which only turns a −0 total into +0).
    for (int rr = max(k.groups, 1); rr < nw; ++rr)
#pragma unroll
        for (int nt = 0; nt < GWG_NT; ++nt) tot[nt][0] = tot[nt][0] + 0.0f, tot[nt][1] = tot[nt][1] + 0.0f;
#pragma unroll
    for (int nt = 0; nt < GWG_NT; ++nt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int o = k.ob + 16 * warp + g + 8 * i, row = rb * GWG_ROWS + nt * TILE_ROWS + t;
            if (o < out && row < rows) y[(size_t)row * out + o] = tot[nt][i];
        }
}

// Blocks of WGS warpgroups, 4 stages in dynamic shared memory (project_gemm.rs wgmma_gemm_smem), one block an SM.
#define WGMMA_GEMM_BF16(WGS)                                                                                      \
    extern "C" __global__ void __launch_bounds__(128 * WGS, 1) project_wgmma_gemm_bf16_w##WGS(                    \
        const u16* xh, const u16* xl, const u16* w, float* y, int rows, int out, int cols, int nw,                \
        const u32* b_tiles) {                                                                                     \
        kernel_entry();                                                                                           \
        (void)xh, (void)xl; /* x comes as b_tiles (prepare_store wrote them beside xh and xl) */                  \
        project_wgmma_gemm<WGS, 4>(w, y, rows, out, cols, nw, b_tiles);                                           \
    }
WGMMA_GEMM_BF16(2)
WGMMA_GEMM_BF16(3)
