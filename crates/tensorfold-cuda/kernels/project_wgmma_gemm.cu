// project_wgmma_gemm.cu: prompt chunks of bf16 and MLX 4-bit g64 weights (project_gemm.rs says which calls) on
// Hopper's warpgroup mma, m64n128k16 (m64n256k16 in the wide bf16 build, project_wgmma_gemm_pipe.cu), with the bits
// the mma.sync prompt kernel and the decode kernels give every output.
//
// Why the bits match: as in project_gemm.cu, a block walks the column groups residue by residue (0, nw, 2nw, …,
// then 1, nw + 1, …), four k16 steps a group with project_stream's A fragments (pairs_bf16, or the 4-bit codes'
// pairs_a4_masked as project_wgmma.cu unpacks them) and x's words where mma.sync's lanes would feed them (x's B
// tiles, project_mma.cu wg_tile_at); wgmma gives a chain of mma.sync m16n8k16 bit for bit when each k16 step holds
// the same operands in the same slots (call 93). bf16: each residue's chain is one accumulator from +0 through its
// groups, and at its end each row's value is hi + lo. 4-bit: each group's chain starts from +0 and folds into the
// residue's sum with the group's scale and centred bias (project_stream_a4's fmas). Then total = p0, total += p1, …
// in residue order (the decode finish's order).
//
// Why it is faster than the mma.sync prompt kernel (16k prefills, calls 116–117: 27B bf16 1,917 against 1,702
// tok/s, 27B MLX4 1,722 against 1,400): one wgmma does a warpgroup's 64 outputs × 128 B columns × 16 k with B
// from shared memory, where mma.sync needs every warp to load B fragments itself; a block's B (64 rows) serves WGS
// warpgroups' outputs.
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
// the group's weights of the block's outputs (GwgStage). Copies run D − 1 groups ahead.

#define GWG_ROWS 64     // rows a block (128 B columns)
#define GWG_NT 16       // n-tiles of 8 B columns
#define GWG_B 16384     // bytes of one group's B tiles for the block's rows (4 tiles of 16 rows)

// One stage in dynamic shared memory (host mirror: project_gemm.rs wgmma_gemm_smem): the B tiles, then the weights
// of the block's outputs. bf16: 128 bytes an output (neighbouring 16-byte chunks swapped on odd outputs, so a quarter
// warp's loads hit distinct banks). 4-bit (tile-major, common.cu): each 16-output tile's 512 bytes
// of codes as stored, then each tile's scales and biases (16 raw values each, in 64-byte slots), then the rows' two
// x chunk sums of the group.
// NTB: n-tiles of 8 B columns a block (GWG_NT, or 32 for the wide bf16 build: 128 rows).
template <bool Q4, int WGS, int NTB = GWG_NT>
struct GwgStage {
    static constexpr int NT = NTB;                              // n-tiles a block
    static constexpr int ROWS = NTB * TILE_ROWS;                // rows a block
    static constexpr int BB = NTB * 1024;                       // bytes of one group's B tiles for the block's rows
    static constexpr int OUTS = 64 * WGS;                       // outputs a block
    static constexpr int TILES = OUTS / 16;                     // 16-output tiles a block
    static constexpr int CODES = BB;                            // 4-bit: the codes
    static constexpr int PARAMS = CODES + TILES * 512;          // 4-bit: tile k's scales at PARAMS + 128k, biases + 64
    static constexpr int XSUMS = PARAMS + TILES * 128;          // 4-bit: row r's two chunk sums at XSUMS + 8r
    static constexpr int BYTES = Q4 ? XSUMS + ROWS * 8 : BB + OUTS * 128;
    static constexpr int THREADS = 128 * WGS;
};

// The weights one block copies: bf16 [out, cols]; or 4-bit codes, scales and biases (tile-major) and x's chunk sums.
template <typename S>
struct GwgWeights {
    const void* w;
    const typename S::raw* scales;
    const typename S::raw* biases;
    const float* xs;
};

// The walks' shared pieces, as macros rather than functions: the serial and the pipelined walk (project_wgmma_gemm_pipe.cu)
// then compile to the machine code the GPU checked, function by function (helper functions changed the SASS of all
// eight prompt kernels). GWG_WALK_SETUP: the block's place, its walk state k (GwgWalk) and its shared memory, for a
// walk with St = GwgStage<…> and arguments rows, out, cols, nw, b_tiles in scope.
#define GWG_WALK_SETUP                                                                                    \
    DYNAMIC_SMEM(smem);                                                                                   \
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;              \
    int tile, rb;                                                                                         \
    gemm_block<false>(tile, rb);                                                                          \
    GwgWalk k;                                                                                            \
    k.q0 = rb * (St::ROWS / 16);                                                                          \
    k.nq = (rows + 15) / 16;                                                                              \
    k.ob = tile * St::OUTS;                                                                               \
    k.rows = rows;                                                                                        \
    k.groups = cols / 64;                                                                                 \
    k.nw = nw;                                                                                            \
    k.Gi = k.ri = 0;                                                                                      \
    const int jobs = k.groups;                                                                            \
    const unsigned char* bt = reinterpret_cast<const unsigned char*>(b_tiles);                            \
    const SmemAddr smem_s = smem_addr(smem)

// The group after k.Gi in the walk's order: the residue's next, or the next residue's first.
#define GWG_NEXT_GROUP(k)          \
    do {                           \
        (k).Gi += (k).nw;          \
        if ((k).Gi >= (k).groups)  \
            (k).Gi = ++(k).ri;     \
    } while (0)

// The walk's end: decode warps past the last group add their zero sums (which only turns a −0 total into +0), then
// each thread stores its totals tot[nt][0..1].
#define GWG_STORE_TOTALS                                                                                   \
    for (int rr = max(k.groups, 1); rr < nw; ++rr)                                                         \
        _Pragma("unroll") for (int nt = 0; nt < St::NT; ++nt) tot[nt][0] = tot[nt][0] + 0.0f,              \
                                                              tot[nt][1] = tot[nt][1] + 0.0f;              \
    _Pragma("unroll") for (int nt = 0; nt < St::NT; ++nt)                                                  \
        _Pragma("unroll") for (int i = 0; i < 2; ++i) {                                                    \
            const int o = k.ob + 16 * warp + g + 8 * i, row = rb * St::ROWS + nt * TILE_ROWS + t;          \
            if (o < out && row < rows) y[(size_t)row * out + o] = tot[nt][i];                              \
        }

// Copies group G's B tiles of row blocks q0 … q0 + NTB/4 − 1 (16 rows each: 4 a block, 8 in the wide build; of nq;
// past the last, the last again: those columns are never written) and its weights of outputs ob … (past the last
// output, the last again) into stage `st`; for 4-bit weights also the scales and biases of the block's tiles and
// the chunk sums of its rows (from row 16·q0).
template <bool Q4, typename S, int WGS, int NTB = GWG_NT>
__device__ __forceinline__ void gwg_issue(SmemAddr st, int G, const unsigned char* __restrict__ bt,
                                          const GwgWeights<S>& wt, int q0, int nq, int ob, int out, int rows,
                                          int cols, int groups) {
    typedef GwgStage<Q4, WGS, NTB> St;
    constexpr int T = St::THREADS, BC = St::BB / 16;
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < (BC + T - 1) / T; ++i) {
        const int c = tid + i * T;
        if (BC % T == 0 || c < BC) {
            const int q = min(q0 + (c >> 8), nq - 1);
            cp_async16(st + c * 16, bt + ((size_t)q * groups + G) * WG_TILE + (c & 255) * 16, true);
        }
    }
    if constexpr (!Q4) {
#pragma unroll
        for (int i = 0; i < St::OUTS * 8 / T; ++i) {
            const int c = tid + i * T, o = c >> 3, k = c & 7;
            const u16* src = reinterpret_cast<const u16*>(wt.w) + (size_t)min(ob + o, out - 1) * cols +
                             (size_t)G * 64 + k * 8;
            cp_async16(st + St::BB + o * 128 + ((k ^ (o & 1)) * 16), src, true);
        }
    } else {
        // Codes: 32 chunks a tile, one a thread (TILES · 32 = THREADS).
        const int tiles = (out + 15) / 16, ct = min(ob / 16 + (tid >> 5), tiles - 1);
        cp_async16(st + St::CODES + tid * 16,
                   reinterpret_cast<const unsigned char*>(wt.w) + a4_tile_code(ct * 16, G, groups, 32) +
                       (tid & 31) * 16,
                   true);
        // Scales and biases: RC chunks a run of 16, two runs a tile.
        constexpr int RC = (int)sizeof(typename S::raw);
        if (tid < St::TILES * 2 * RC) {
            const int run = tid / RC, part = tid % RC, pt = min(ob / 16 + (run >> 1), tiles - 1);
            const typename S::raw* src = ((run & 1) ? wt.biases : wt.scales) + a4_tile_param(pt * 16, G, groups);
            cp_async16(st + St::PARAMS + (run >> 1) * 128 + (run & 1) * 64 + part * 16,
                       reinterpret_cast<const unsigned char*>(src) + part * 16, true);
        }
        // x's two chunk sums of the group, a row's pair per thread (two 4-byte copies).
        if (tid < St::ROWS * 2) {
            const int r = tid >> 1, row = min(q0 * 16 + r, rows - 1);
            cp_async4(st + St::XSUMS + tid * 4, wt.xs + (size_t)row * (cols / 32) + 2 * G + (tid & 1), true);
        }
    }
}

#if !defined(TF_EMU) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One m64n256k16 step of the wide build: d (32 n-tiles' C fragments, mma.sync's layout) += A·B, B by `desc`;
// scale_d 0 takes no C.
__device__ __forceinline__ void gwg_mma_n256(float (&d)[32][4], const u32 (&a)[4], u64 desc, int scale_d) {
#define GWG_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
        "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
        "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,"
        "%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,"
        "%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 0;\n}\n"
        : GWG_D4(0), GWG_D4(1), GWG_D4(2), GWG_D4(3), GWG_D4(4), GWG_D4(5), GWG_D4(6), GWG_D4(7), GWG_D4(8),
          GWG_D4(9), GWG_D4(10), GWG_D4(11), GWG_D4(12), GWG_D4(13), GWG_D4(14), GWG_D4(15), GWG_D4(16), GWG_D4(17),
          GWG_D4(18), GWG_D4(19), GWG_D4(20), GWG_D4(21), GWG_D4(22), GWG_D4(23), GWG_D4(24), GWG_D4(25), GWG_D4(26),
          GWG_D4(27), GWG_D4(28), GWG_D4(29), GWG_D4(30), GWG_D4(31)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d)
        : "memory");
#undef GWG_D4
}
#endif

// d += A·B for one group's four k16 steps: a[q] the A fragment of step q, the B operand at `bt` (`bts` its shared
// address), 8·NTB columns (m64n128k16, or m64n256k16 for the wide build). Committed as one wgmma group; not waited
// for here. FRESH: the first step takes no C (FRESH_GROUPS, project_mma.cu), modelled on the emulator as a C of +0.
template <bool FRESH = false, int NTB = GWG_NT>
__device__ __forceinline__ void gwg_group_mma(float (&d)[NTB][4], u32 (&a)[4][4], const unsigned char* bt,
                                              SmemAddr bts) {
#ifdef TF_EMU
    // The emulator feeds each n-tile to its mma.sync model with the B words mma.sync's lanes would hold.
    (void)bts;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (FRESH)
        for (int nt = 0; nt < NTB; ++nt)
            for (int i = 0; i < 4; ++i) d[nt][i] = 0.0f;
    for (int q = 0; q < 4; ++q)
        for (int nt = 0; nt < NTB; ++nt) {
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
        if constexpr (NTB == 32)
            gwg_mma_n256(d, a[q], desc, FRESH && q == 0 ? 0 : 1);
        else {
            asm volatile(
                "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
                "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
                "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 0;\n}\n"
                : GWG_D(0), GWG_D(1), GWG_D(2), GWG_D(3), GWG_D(4), GWG_D(5), GWG_D(6), GWG_D(7), GWG_D(8), GWG_D(9),
                  GWG_D(10), GWG_D(11), GWG_D(12), GWG_D(13), GWG_D(14), GWG_D(15)
                : "r"(a[q][0]), "r"(a[q][1]), "r"(a[q][2]), "r"(a[q][3]), "l"(desc), "r"(FRESH && q == 0 ? 0 : 1)
                : "memory");
        }
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
template <int NTB = GWG_NT>
__device__ __forceinline__ void gwg_wait(float (&d)[NTB][4], bool read) {
#if !defined(TF_EMU) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    if (read)
#pragma unroll
        for (int nt = 0; nt < NTB; ++nt)
#pragma unroll
            for (int k = 0; k < 4; ++k) asm volatile("" : "+f"(d[nt][k])::"memory");
#else
    (void)d, (void)read;
#endif
}

// The walk of one block: its place and the copies' cursor (Gi, ri; the math walks residue by residue itself).
struct GwgWalk {
    int q0, nq, ob, rows, groups, nw;
    int Gi, ri;
};

// Group j of the walk (of jobs): refill the stage group j − 1 read, load this group's A fragments, issue its
// wgmmas and wait for them. 4-bit weights: the group's sum then folds into acc with its scale and bias
// (project_stream_a4's fmas) and d starts again from +0.
template <bool Q4, typename S, int WGS, int D>
__device__ __forceinline__ void gwg_group(int j, int jobs, GwgWalk& k, unsigned char* smem, SmemAddr smem_s,
                                          const unsigned char* __restrict__ bt, const GwgWeights<S>& wt, int out,
                                          int cols, u32 mask, float zero, float (&d)[GWG_NT][4],
                                          float (&acc)[GWG_NT][2]) {
    typedef GwgStage<Q4, WGS> St;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    cp_async_wait<D - 2>();  // this thread's copies of group j have landed
#ifndef TF_EMU
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the B tiles are wgmma's (async proxy) to read
#endif
    __syncthreads();  // every thread's copies of group j are in; every warpgroup is done with group j − 1's stage
    if (j + D - 1 < jobs) {
        gwg_issue<Q4, S, WGS>(smem_s + ((unsigned)(j + D - 1) % D) * St::BYTES, k.Gi, bt, wt, k.q0, k.nq, k.ob, out,
                              k.rows, cols, k.groups);
        GWG_NEXT_GROUP(k);
    }
    cp_async_commit();
    const unsigned st = ((unsigned)j % D) * St::BYTES;
    // Step q = 2jj + h: project_stream's mma_bf16(pg[2h], pg8[2h], pg[2h + 1], pg8[2h + 1]) of word 2t + jj.
    u32 a[4][4];
    uint2 cg, cg8;  // 4-bit: this lane's two words of codes of output g and of g + 8 (project_wgmma.cu's)
    if constexpr (Q4) {
        const unsigned char* cw = smem + st + St::CODES + warp * 512;
        cg = *reinterpret_cast<const uint2*>(cw + g * 32 + t * 8);
        cg8 = *reinterpret_cast<const uint2*>(cw + (g + 8) * 32 + t * 8);
    }
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
        u32 pg[4], pg8[4];
        if constexpr (Q4) {
            pairs_a4_masked(jj ? cg.y : cg.x, mask, pg);
            pairs_a4_masked(jj ? cg8.y : cg8.x, mask, pg8);
        } else {
            const unsigned char* wa = smem + st + St::BB + (16 * warp + g) * 128;
            const int at = ((2 * t + jj) ^ (g & 1)) * 16;  // outputs o and o + 8 have g's parity
            pairs_bf16(*reinterpret_cast<const uint4*>(wa + at), pg);
            pairs_bf16(*reinterpret_cast<const uint4*>(wa + 8 * 128 + at), pg8);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            a[2 * jj + h][0] = pg[2 * h];
            a[2 * jj + h][1] = pg8[2 * h];
            a[2 * jj + h][2] = pg[2 * h + 1];
            a[2 * jj + h][3] = pg8[2 * h + 1];
        }
    }
    gwg_group_mma<Q4 && FRESH_GROUPS>(d, a, smem + st, smem_s + st);
    gwg_wait(d, Q4);  // before anything may reuse the A registers (see the top of the file)
    if constexpr (Q4) {
        // project_stream_a4's group end: x's group sum (0, then its two chunk sums), the scale and centred bias fmas.
        const unsigned char* prm = smem + st + St::PARAMS + warp * 128;
        const typename S::raw* sc = reinterpret_cast<const typename S::raw*>(prm);
        const typename S::raw* bi = reinterpret_cast<const typename S::raw*>(prm + 64);
        const float s0 = S::get(sc[g]), s8 = S::get(sc[g + 8]);
        const float b0 = centred_bias(s0, S::get(bi[g])), b8 = centred_bias(s8, S::get(bi[g + 8]));
#pragma unroll
        for (int nt = 0; nt < GWG_NT; ++nt) {
            const float2 xv = *reinterpret_cast<const float2*>(smem + st + St::XSUMS + (nt * TILE_ROWS + t) * 8);
            float sx = 0.0f;
            sx += xv.x;
            sx += xv.y;
            const HiLo v = hi_plus_lo(d[nt]);
            acc[nt][0] = fmaf(b0, sx, fmaf(s0, v.g, acc[nt][0]));
            acc[nt][1] = fmaf(b8, sx, fmaf(s8, v.g8, acc[nt][1]));
            if (!FRESH_GROUPS) {  // (else the next group's first step takes no C)
#pragma unroll
                for (int i = 0; i < 4; ++i) d[nt][i] = zero;
            }
        }
    }
}

// y = x Wᵀ for bf16 weights (wt.w [out, cols], cols % 64 == 0) or MLX 4-bit g64 ones (tile-major codes, scales and
// biases of type S, x's chunk sums wt.xs), x as its B tiles (b_tiles); D stages (≥ 2).
template <bool Q4, typename S, int WGS, int D>
__device__ __forceinline__ void project_wgmma_gemm(const GwgWeights<S>& wt, float* __restrict__ y, int rows, int out,
                                                   int cols, int nw, const u32* __restrict__ b_tiles) {
    typedef GwgStage<Q4, WGS> St;
    GWG_WALK_SETUP;
#pragma unroll
    for (int s = 0; s < D - 1; ++s) {
        if (s < jobs) {
            gwg_issue<Q4, S, WGS>(smem_s + s * St::BYTES, k.Gi, bt, wt, k.q0, k.nq, k.ob, out, rows, cols, k.groups);
            GWG_NEXT_GROUP(k);
        }
        cp_async_commit();
    }
    // Each bf16 residue's chain starts at a +0 the compiler cannot see (told it is zero, ptxas would drop it:
    // wgmma with scale-d off); a 4-bit group's takes no C at all unless TF_ZEROED_GROUPS (FRESH_GROUPS).
    const float zero = opaque_zero();
    const u32 mask = opaque_nibble_mask();
    float d[GWG_NT][4], acc[GWG_NT][2], tot[GWG_NT][2];
#pragma unroll
    for (int nt = 0; nt < GWG_NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) d[nt][i] = zero;
        tot[nt][0] = tot[nt][1] = acc[nt][0] = acc[nt][1] = 0.0f;
    }
    int j = 0;
    for (int r = 0; r < min(nw, k.groups); ++r) {
        // Residue r's groups r, r + nw, … in order.
        for (int G = r; G < k.groups; G += nw)
            gwg_group<Q4, S, WGS, D>(j++, jobs, k, smem, smem_s, bt, wt, out, cols, mask, zero, d, acc);
        gwg_wait(d, true);  // (a no-op: the last group was waited for) pins the accumulators for the reads below
        // The decode finish adds warp r's sums after warp r − 1's.
#pragma unroll
        for (int nt = 0; nt < GWG_NT; ++nt) {
            const HiLo v = Q4 ? HiLo{acc[nt][0], acc[nt][1]} : hi_plus_lo(d[nt]);
            tot[nt][0] = r == 0 ? v.g : tot[nt][0] + v.g;
            tot[nt][1] = r == 0 ? v.g8 : tot[nt][1] + v.g8;
            acc[nt][0] = acc[nt][1] = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; ++i) d[nt][i] = zero;
        }
    }
    cp_async_wait<0>();
    GWG_STORE_TOTALS;
}
