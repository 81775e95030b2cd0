// project_wgmma_gemm_pipe.cu: the wgmma prompt kernels: bf16 weights on the pipelined walk (a group's wgmmas
// running while the next group is staged and issued) unless built with TF_GEMM_SERIAL, 4-bit ones on
// project_wgmma_gemm.cu's serial walk.
// bf16 prompt chunks keep one group's wgmmas running while the next group is staged and issued (GEMM_PIPE):
// each warpgroup waits for group j − 1's wgmmas only after issuing group j's, so the tensor cores always have a
// warpgroup's next group queued. Group j's A fragments live in one of two register sets and the other set is
// pinned live until group j − 1's wgmmas are waited for: a wgmma reads its A registers while it runs (call 115),
// and a register the compiler thinks free must not be reused before then. Copies run D − 2 groups ahead, so the
// stage group j's copies overwrite (group j − 2's) is free once every warpgroup has waited for group j − 2, which
// each did before group j's barrier. The same groups, operands and accumulator chains as the serial walk: the bits
// are the same. Call 164 (an H100, Nsight Compute): the serial walk kept the tensor pipe 41% busy on a 2048-row
// gate projection, its warps stalled most at the group barrier. -DTF_GEMM_SERIAL (TENSORFOLD_CUDA_DEFINES) keeps
// the serial walk for same-run comparisons.
#ifdef TF_GEMM_SERIAL
#define GEMM_PIPE false
#else
#define GEMM_PIPE true
#endif
// Stages of the pipelined walk: 200 KB with 3 warpgroups (project_gemm.rs wgmma_gemm_smem gives every bf16 build 5;
// the serial walk uses 4 of them).
#define GWG_BF16_PIPE_STAGES 5

// Group j of a pipelined bf16 walk: A fragments into `a` (the other set, `prev`, held group j − 1's), the group's
// wgmmas issued, then group j − 1's waited for.
template <typename S, int WGS, int D, int NTB = GWG_NT>
__device__ __forceinline__ void gwg_bf16_step(int j, int jobs, GwgWalk& k, unsigned char* smem, SmemAddr smem_s,
                                              const unsigned char* __restrict__ bt, const GwgWeights<S>& wt,
                                              int out, int cols, float (&d)[NTB][4], u32 (&a)[4][4],
                                              u32 (&prev)[4][4]) {
    typedef GwgStage<false, WGS, NTB> St;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warp = threadIdx.x >> 5;
    cp_async_wait<D - 3>();  // this thread's copies of group j have landed
#ifndef TF_EMU
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
    __syncthreads();  // every thread's copies of group j are in; every warpgroup has waited for group j − 2
    if (j + D - 2 < jobs) {
        gwg_issue<false, S, WGS, NTB>(smem_s + ((unsigned)(j + D - 2) % D) * St::BYTES, k.Gi, bt, wt, k.q0, k.nq,
                                      k.ob, out, k.rows, cols, k.groups);
        GWG_NEXT_GROUP(k);
    }
    cp_async_commit();
    const unsigned st = ((unsigned)j % D) * St::BYTES;
    const unsigned char* wa = smem + st + St::BB + (16 * warp + g) * 128;
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
        u32 pg[4], pg8[4];
        const int at = ((2 * t + jj) ^ (g & 1)) * 16;  // as gwg_group
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
    gwg_group_mma<false, NTB>(d, a, smem + st, smem_s + st);
#if !defined(TF_EMU) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // group j − 1's wgmmas are done ...
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(prev[q][i])::"memory");  // ... so its A registers may go
#else
    (void)prev;
#endif
}

// y = x Wᵀ for bf16 weights by the pipelined walk (GEMM_PIPE): project_wgmma_gemm's blocks, residues and bits;
// NTB n-tiles a block (GWG_NT: 64 rows; 32: the wide build's 128), D stages.
template <typename S, int WGS, int NTB = GWG_NT, int D = GWG_BF16_PIPE_STAGES>
__device__ __forceinline__ void project_wgmma_gemm_bf16_pipe(const GwgWeights<S>& wt, float* __restrict__ y,
                                                             int rows, int out, int cols, int nw,
                                                             const u32* __restrict__ b_tiles) {
    typedef GwgStage<false, WGS, NTB> St;
    GWG_WALK_SETUP;
#pragma unroll
    for (int s = 0; s < D - 2; ++s) {
        if (s < jobs) {
            gwg_issue<false, S, WGS, NTB>(smem_s + s * St::BYTES, k.Gi, bt, wt, k.q0, k.nq, k.ob, out, rows, cols,
                                          k.groups);
            GWG_NEXT_GROUP(k);
        }
        cp_async_commit();
    }
    // Each residue's chain starts at a +0 the compiler cannot see, as in the serial walk, but made by an asm rather
    // than a shuffle: a shuffle's float is a bitcast integer, and NVVM then carried the accumulators between groups
    // as integers, with moves that read them while their wgmmas ran (ptxas serialised every wgmma for it).
    float zero;
#ifdef TF_EMU
    zero = 0.0f;
#else
    asm volatile("mov.b32 %0, 0;" : "=f"(zero));
#endif
    float d[NTB][4], tot[NTB][2];
    u32 a0[4][4], a1[4][4];
#pragma unroll
    for (int nt = 0; nt < NTB; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) d[nt][i] = zero;
        tot[nt][0] = tot[nt][1] = 0.0f;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int i = 0; i < 4; ++i) a0[q][i] = a1[q][i] = 0u;
    int j = 0;
    for (int r = 0; r < min(nw, k.groups); ++r) {
        // Residue r's groups r, r + nw, … in order, the register sets taking turns.
        const int n = (k.groups - 1 - r) / nw + 1;
        int i = 0;
        for (; i + 1 < n; i += 2) {
            gwg_bf16_step<S, WGS, D, NTB>(j++, jobs, k, smem, smem_s, bt, wt, out, cols, d, a0, a1);
            gwg_bf16_step<S, WGS, D, NTB>(j++, jobs, k, smem, smem_s, bt, wt, out, cols, d, a1, a0);
        }
        if (i < n) gwg_bf16_step<S, WGS, D, NTB>(j++, jobs, k, smem, smem_s, bt, wt, out, cols, d, a0, a1);
        gwg_wait(d, true);  // the residue's last group is done; the accumulators are read below
#if !defined(TF_EMU) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma unroll
        for (int q = 0; q < 4; ++q)
#pragma unroll
            for (int u = 0; u < 4; ++u) asm volatile("" : "+r"(a0[q][u]), "+r"(a1[q][u])::"memory");
#endif
        // The decode finish adds warp r's sums after warp r − 1's.
#pragma unroll
        for (int nt = 0; nt < NTB; ++nt) {
            const HiLo v = hi_plus_lo(d[nt]);
            tot[nt][0] = r == 0 ? v.g : tot[nt][0] + v.g;
            tot[nt][1] = r == 0 ? v.g8 : tot[nt][1] + v.g8;
#pragma unroll
            for (int u = 0; u < 4; ++u) d[nt][u] = zero;
        }
    }
    cp_async_wait<0>();
    GWG_STORE_TOTALS;
}

// Blocks of WGS warpgroups, 4 stages (5 pipelined) in dynamic shared memory (project_gemm.rs wgmma_gemm_smem), one
// block an SM.
#define WGMMA_GEMM_BF16(WGS)                                                                                      \
    extern "C" __global__ void __launch_bounds__(128 * WGS, 1) project_wgmma_gemm_bf16_w##WGS(                    \
        const u16* xh, const u16* xl, const u16* w, float* y, int rows, int out, int cols, int nw,                \
        const u32* b_tiles) {                                                                                     \
        kernel_entry();                                                                                           \
        (void)xh, (void)xl; /* x comes as b_tiles (prepare_store wrote them beside xh and xl) */                  \
        const GwgWeights<F32T> wt{w, nullptr, nullptr, nullptr};                                                  \
        if (GEMM_PIPE) project_wgmma_gemm_bf16_pipe<F32T, WGS>(wt, y, rows, out, cols, nw, b_tiles);              \
        else project_wgmma_gemm<false, F32T, WGS, 4>(wt, y, rows, out, cols, nw, b_tiles);                        \
    }
WGMMA_GEMM_BF16(2)
WGMMA_GEMM_BF16(3)

// The wide build (project_gemm.rs wide_bf16: bf16 chunks of more than 64 rows): blocks of 2 warpgroups over 128
// outputs × 128 rows, m64n256k16, 4 stages of 48 KB. Why: at 64 rows a block the pipelined walk needs about 149
// bytes a cycle of shared memory at the tensor cores' full rate (each warpgroup's wgmmas read B: 64; A by LDS: 32;
// the copies: 53) against the SM's 128; at 128 rows about 127 (64, 16, 47), so its ceiling is the tensor cores'.
// Call 185 (an H100): 27B bf16 prefill 2k 13% faster than blocks of 3 warpgroups, 16k 8%. The same groups, chains
// and residue order, so the same bits.
#define GWG_WIDE_STAGES 4
extern "C" __global__ void __launch_bounds__(256, 1) project_wgmma_gemm_bf16_w2n256(
    const u16* xh, const u16* xl, const u16* w, float* y, int rows, int out, int cols, int nw, const u32* b_tiles) {
    kernel_entry();
    (void)xh, (void)xl;
    const GwgWeights<F32T> wt{w, nullptr, nullptr, nullptr};
    project_wgmma_gemm_bf16_pipe<F32T, 2, 32, GWG_WIDE_STAGES>(wt, y, rows, out, cols, nw, b_tiles);
}

// MLX 4-bit g64 weights, scales and biases of type S.
#define WGMMA_GEMM_A4(WGS, NAME, S)                                                                               \
    extern "C" __global__ void __launch_bounds__(128 * WGS, 1) project_wgmma_gemm_a4_g2_##NAME##_w##WGS(          \
        const u16* xh, const u16* xl, const float* xs, const u32* codes, const S::raw* scales,                    \
        const S::raw* biases, float* y, int rows, int out, int cols, int nw, const u32* b_tiles) {                \
        kernel_entry();                                                                                           \
        (void)xh, (void)xl;                                                                                       \
        const GwgWeights<S> wt{codes, scales, biases, xs};                                                        \
        project_wgmma_gemm<true, S, WGS, 4>(wt, y, rows, out, cols, nw, b_tiles);                                 \
    }
#define WGMMA_GEMM_A4_ALL(WGS) \
    WGMMA_GEMM_A4(WGS, f32, F32T) WGMMA_GEMM_A4(WGS, f16, F16T) WGMMA_GEMM_A4(WGS, bf16, BF16T)
WGMMA_GEMM_A4_ALL(2)
WGMMA_GEMM_A4_ALL(3)
