// project_wgmma.cu: (experimental, TENSORFOLD_CUDA_WGMMA=1) rounds of 5 to 16 rows of MLX 4-bit g64 weights on
// Hopper's warpgroup mma (wgmma m64n32k16), with the bits of the decode kernels (project_stream.cu).
//
// Why the bits match: wgmma gives a chain of mma.sync m16n8k16 bit for bit when each k16 step holds the same
// operands in the same slots (call 93, bench/probe/wgmma_bits.cu). A block is one warpgroup: warp w owns the 16
// outputs of tile 4·blockIdx.x + w, as an m16 tile of the mma (the A fragments are project_stream's, unpacked the
// same way), and the 16 rows are the 32 B columns (hi and lo side by side, TILE_ROWS rows an n-tile). The decode
// kernels split an output's groups over nw warps (warp r folds groups r, r + nw, …) and add the warps' sums in
// warp order; here the block walks residue r's groups in order, then adds the residue's sum to the total: the same
// per-group scale fmas, the same order. The B tile puts each k16 step's x words where mma.sync's lanes would feed
// them: slot 2t (+1) of step (j, h) is word 2t + j's pair 2h, slot 2t + 8 (+9) its pair 2h + 1.
//
// Needs the module built for sm_90a (nvrtc.rs): for sm_90 ptxas refuses wgmma, and the kernel traps.

#define WG_STEP 256    // bytes between k16 steps in the B tile (2 core matrices of 128 bytes along K)
#define WG_TILE 4096   // the B tile of one group: 4 column groups × 8 core matrices × 128 bytes

// +0.0f from a shuffle, so the compiler cannot fold it.
__device__ __forceinline__ float opaque_zero() {
#ifdef TF_EMU
    return 0.0f;
#else
    return __shfl_sync(FULL_MASK, 0.0f, 0);
#endif
}

// Byte offset in the B tile of column n (0..31) at k index kk (0..63, 16 per step): core matrices of 8 columns ×
// 8 k (16 bytes a column), K-adjacent ones 128 bytes apart (LBO), column-adjacent 1,024 (SBO): the layout the probe
// verified.
__device__ __forceinline__ int wg_b_at(int n, int kk) {
    return (((n >> 3) * 8 + (kk >> 3)) * 128) + (n & 7) * 16 + (kk & 7) * 2;
}

#if !defined(TF_EMU) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The shared-memory matrix descriptor of a B step at `addr` (no swizzle; LBO 128, SBO 1,024).
__device__ __forceinline__ u64 wg_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(128 >> 4) << 16) | ((u64)(1024 >> 4) << 32);
}
#endif

// d += A·B for the group's four k16 steps: a[q] the A fragment of step q, the B tile at `bt` (`bts` its shared
// address). d[nt] is the C fragment of n-tile nt, as mma.sync's.
__device__ __forceinline__ void wg_group_mma(float (&d)[4][4], const u32 (&a)[4][4], const unsigned char* bt,
                                             SmemAddr bts) {
#ifdef TF_EMU
    // The emulator feeds each n-tile to its mma.sync model with the B words mma.sync's lanes would hold.
    (void)bts;
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int q = 0; q < 4; ++q)
        for (int nt = 0; nt < 4; ++nt) {
            const unsigned char* s = bt + q * WG_STEP;
            const u32 b0 = *reinterpret_cast<const u32*>(s + wg_b_at(nt * 8 + g, 2 * t));
            const u32 b1 = *reinterpret_cast<const u32*>(s + wg_b_at(nt * 8 + g, 2 * t + 8));
            emu_mma_bf16(d[nt], a[q][0], a[q][1], a[q][2], a[q][3], b0, b1);
        }
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
    (void)bt;
    // The accumulators and A fragments are pinned before the fence and the accumulators again after the wait:
    // the compiler must neither move their writes past the fence nor read the results before the wait (the
    // probe's ordering).
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int k = 0; k < 4; ++k) asm volatile("" : "+f"(d[nt][k])::"memory");
    u32 av[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            av[q][k] = a[q][k];
            asm volatile("" : "+r"(av[q][k])::"memory");
        }
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const u64 desc = wg_desc(bts + q * WG_STEP);
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
            "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
            : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]),
              "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]),
              "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
            : "r"(av[q][0]), "r"(av[q][1]), "r"(av[q][2]), "r"(av[q][3]), "l"(desc)
            : "memory");
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int k = 0; k < 4; ++k) asm volatile("" : "+f"(d[nt][k])::"memory");
#else
    (void)d; (void)a; (void)bt; (void)bts;
    __trap();
#endif
}

// Piece i (of 8) of this thread's share of a group's B tile: the 4 bytes of x for slots 2sp, 2sp + 1 of k16 step
// q = 2j + h and column n (row n / 2 % 4 of n-tile n / 8, half n % 2): x's row, its half (lo), the column within
// the group and the byte in the tile. The one place the tile's slot mapping is written.
struct WgPiece {
    int row, lo, col, dst;
};
__device__ __forceinline__ WgPiece wg_piece(int i, int rows) {
    const int p = threadIdx.x + 128 * i, q = p >> 8, n = (p >> 3) & 31, sp = p & 7;
    const int j = q >> 1, h = q & 1, tt = sp & 3, p2 = sp >> 2;
    return WgPiece{min((n >> 3) * TILE_ROWS + ((n & 7) >> 1), rows - 1), n & 1,
                   (2 * tt + j) * 8 + 4 * h + 2 * p2, wg_b_at(n, 16 * q + 2 * sp)};
}

// One group's inputs, loaded a group ahead into registers: this thread's 8 pieces of the B tile, its lane's code
// words (outputs g and g + 8, words 2t and 2t + 1), their scales and biases, and its rows' x sums.
template <typename S>
struct WgInputs {
    u32 piece[8];
    uint2 cg, cg8;
    typename S::raw s0, s8, b0, b8;
    float xs0[4], xs1[4];
};

template <typename S>
__device__ __forceinline__ void wg_load(WgInputs<S>& in, int G, const u16* __restrict__ xh,
                                        const u16* __restrict__ xl, const float* __restrict__ xs,
                                        const u32* __restrict__ codes, const typename S::raw* __restrict__ scales,
                                        const typename S::raw* __restrict__ biases, int o, int o8, int rows, int cols,
                                        int groups) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const WgPiece pc = wg_piece(i, rows);
        const u16* src = pc.lo ? xl : xh;
        in.piece[i] = *reinterpret_cast<const u32*>(src + (size_t)pc.row * cols + (size_t)G * 64 + pc.col);
    }
    const unsigned char* cb = reinterpret_cast<const unsigned char*>(codes);
    in.cg = *reinterpret_cast<const uint2*>(cb + a4_tile_code(o, G, groups, 32) + t * 8);
    in.cg8 = *reinterpret_cast<const uint2*>(cb + a4_tile_code(o8, G, groups, 32) + t * 8);
    const size_t p0 = a4_tile_param(o, G, groups), p8 = a4_tile_param(o8, G, groups);
    in.s0 = scales[p0];
    in.b0 = biases[p0];
    in.s8 = scales[p8];
    in.b8 = biases[p8];
    const int chunks = cols / 32;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
        const int crow = min(nt * TILE_ROWS + t, rows - 1);
        in.xs0[nt] = xs[(size_t)crow * chunks + (size_t)G * 2];
        in.xs1[nt] = xs[(size_t)crow * chunks + (size_t)G * 2 + 1];
    }
}

template <typename S>
__device__ __forceinline__ void project_wgmma_a4(const u16* __restrict__ xh, const u16* __restrict__ xl,
                                                 const float* __restrict__ xs, const u32* __restrict__ codes,
                                                 const typename S::raw* __restrict__ scales,
                                                 const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                                 int rows, int out, int cols, int nw) {
    __shared__ __align__(1024) unsigned char bt[WG_TILE];
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, t = lane & 3, warp = tid >> 5;
    const int tiles = (out + MMA_OUT - 1) / MMA_OUT, tile = min((int)blockIdx.x * 4 + warp, tiles - 1);
    const int o = tile * MMA_OUT + g, o8 = o + 8;  // tile-major arrays are padded to whole tiles
    const int groups = cols / 64;
    const u32 mask = opaque_nibble_mask();
    // The accumulators start each group at a +0 the compiler cannot see: told they are zero, ptxas drops them
    // (HGMMA with scale-d off, D = A·B), where the stream kernels' mma.sync adds its C of +0 (D = A·B + 0, which
    // differs when A·B is −0).
    const float zero = opaque_zero();
    const SmemAddr bts = smem_addr(bt);
    float tot[4][2];
    WgInputs<S> cur, nxt;
    // The groups in residue order (r, then G = r, r + nw, …), each loaded one group ahead.
    if (groups > 0) wg_load<S>(cur, 0, xh, xl, xs, codes, scales, biases, o, o8, rows, cols, groups);
    for (int r = 0; r < nw; ++r) {
        float acc[4][2];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) acc[nt][0] = acc[nt][1] = 0.0f;
        for (int G = r; G < groups; G += nw) {
            const int Gn = G + nw < groups ? G + nw : r + 1;
            if (Gn < groups && (G + nw < groups || r + 1 < nw))
                wg_load<S>(nxt, Gn, xh, xl, xs, codes, scales, biases, o, o8, rows, cols, groups);
            // This group's B tile (every warp is done with the last one: the barrier at the end of its group).
#pragma unroll
            for (int i = 0; i < 8; ++i) *reinterpret_cast<u32*>(bt + wg_piece(i, rows).dst) = cur.piece[i];
#ifndef TF_EMU
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the tile is wgmma's (async proxy) to read
#endif
            __syncthreads();
            u32 a[4][4];  // step q = 2j + h: project_stream's mma_bf16(pg[2h], pg8[2h], pg[2h + 1], pg8[2h + 1])
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                u32 pg[4], pg8[4];
                pairs_a4_masked(jj ? cur.cg.y : cur.cg.x, mask, pg);
                pairs_a4_masked(jj ? cur.cg8.y : cur.cg8.x, mask, pg8);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    a[2 * jj + h][0] = pg[2 * h];
                    a[2 * jj + h][1] = pg8[2 * h];
                    a[2 * jj + h][2] = pg[2 * h + 1];
                    a[2 * jj + h][3] = pg8[2 * h + 1];
                }
            }
            float d[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int k = 0; k < 4; ++k) d[nt][k] = zero;
            wg_group_mma(d, a, bt, bts);
            // project_stream_a4's group end: x's group sums, the scale and centred bias fmas.
            const float s0 = S::get(cur.s0), s8 = S::get(cur.s8);
            const float sb[4] = {s0, centred_bias(s0, S::get(cur.b0)), s8, centred_bias(s8, S::get(cur.b8))};
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                float sx = 0.0f;
                sx += cur.xs0[nt];
                sx += cur.xs1[nt];
                const HiLo v = hi_plus_lo(d[nt]);
                acc[nt][0] = fmaf(sb[1], sx, fmaf(sb[0], v.g, acc[nt][0]));
                acc[nt][1] = fmaf(sb[3], sx, fmaf(sb[2], v.g8, acc[nt][1]));
            }
            __syncthreads();  // every warp's wgmma has read the tile before the next group overwrites it
            cur = nxt;
        }
        // The decode finish adds warp r's sums after warp r − 1's (a warp with no groups adds zeros).
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int i = 0; i < 2; ++i) tot[nt][i] = r == 0 ? acc[nt][i] : tot[nt][i] + acc[nt][i];
    }
    if ((int)blockIdx.x * 4 + warp >= tiles) return;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = nt * TILE_ROWS + t, oo = tile * MMA_OUT + g + 8 * i;
            if (row < rows && oo < out) y[(size_t)row * out + oo] = tot[nt][i];
        }
}

#define WGMMA_A4(NAME, S)                                                                                        \
    extern "C" __global__ void __launch_bounds__(128)                                                            \
        project_wgmma_a4_g2_##NAME(const u16* xh, const u16* xl, const float* xs, const u32* codes,              \
                                   const S::raw* scales, const S::raw* biases, float* y, int rows, int out,     \
                                   int cols, int nw) {                                                          \
        kernel_entry();                                                                                          \
        project_wgmma_a4<S>(xh, xl, xs, codes, scales, biases, y, rows, out, cols, nw);                         \
    }
WGMMA_A4(f32, F32T)
WGMMA_A4(f16, F16T)
WGMMA_A4(bf16, BF16T)
