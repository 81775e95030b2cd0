// attention_lanes.cu: attn_block's score pass with each of a score's four chains on its own lane
// (attn_block_d*_q3k8, the default): the same chains, sums and folds as attention_block.cu's other shapes, so the
// same bits, with 62% of q3k4's shared-memory wavefronts (a 16k prefill's launch 731 µs against 791 on an H100;
// 16k and 32k 27B prefills 2.5% and 4% faster, call 154).
//
// Why: Nsight Compute on the 27B's prompt attention (calls 151 and 153) found it held by shared memory, not by its
// fmas: 83M load wavefronts against about 190M warp fmas in one launch (the SM serves one wavefront a cycle and four
// warp fmas), L1 66% busy and the fma pipes 35%. A 128-bit shared load costs four wavefronts whatever its addresses, so
// the loads that broadcast one column's query to many lanes were as dear as those that bring distinct keys. Here a warp
// takes six columns and 64 keys; lane (kx, e) runs chain e (dimensions e, e + 4, …) of keys 4kx … 4kx + 3 of both tiles
// for all six columns: per 4 dimensions 2 key loads (128-bit, distinct) and 6 query loads (32-bit, four addresses a
// warp) for 48 fmas, 14 wavefronts where q3k4 takes 28. The chains meet by two shuffles, ((a0 + a1) + (a2 + a3)) as
// block_score adds them (a float sum is the same in either order). In pass 2 (block_values, attention_tiles.cu) a
// warp's lanes take distinct dimensions of its six columns' value sums: per key 8 wavefronts of values and 6 of weights
// for 48 fmas, where 16 × 2 lanes took 19.

// Pass 1 over the chunk's tiles, two at a time: scores into ps, each tile's statistics (block_tile_stats).
template <int HD, int BQ, typename KV>
__device__ __forceinline__ void block_scores_lanes(const float* qs, float* ps, float* kv, float* tmax, float* tsum,
                                                   const int* ncol, int T, int first, int nmax, int clen,
                                                   const u64* pages, const float* kround, const int* m,
                                                   const int* paths, int rr, int off, float scale) {
    constexpr int WC = BQ / (BT / 32);  // columns a warp
    static_assert(WC % 2 == 0, "a warp's columns split in halves");
    constexpr int HC = WC / 2;
    const int lane = threadIdx.x & 31, c0 = WC * (threadIdx.x >> 5);
    const int kx = lane & 7, e = lane >> 3;  // keys 4kx … 4kx + 3 of each tile of the pair; chain e
    // After the two shuffles lane e holds tile (e & 1) of the pair, columns c0 + HC·(e >> 1) …
    const bool odd = e & 1, upper = e >> 1;
    float ka[HD / 8], kb[HD / 8];
    block_keys_load<HD, KV>(ka, first, nmax, clen, pages, kround, m, paths, rr, off);
    if (T > 1) block_keys_load<HD, KV>(kb, first + 32, nmax, clen, pages, kround, m, paths, rr, off);
    for (int tp = 0; 2 * tp < T; ++tp) {
        const int ta = 2 * tp, tb = ta + 1;
        block_keys_store<HD>(ka, kv, 64, 0);
        if (tb < T) block_keys_store<HD>(kb, kv, 64, 32);
        __syncthreads();  // keys in (and, from the second pair on, the previous pair's statistics done)
        if (ta + 2 < T) block_keys_load<HD, KV>(ka, first + 32 * (ta + 2), nmax, clen, pages, kround, m, paths, rr, off);
        if (tb + 2 < T) block_keys_load<HD, KV>(kb, first + 32 * (tb + 2), nmax, clen, pages, kround, m, paths, rr, off);
        float a[WC][8];  // a[c][j]: chain e of column c0 + c, key j (j < 4: tile ta, key 4kx + j; else tile tb)
#pragma unroll
        for (int c = 0; c < WC; ++c)
#pragma unroll
            for (int j = 0; j < 8; ++j) a[c][j] = 0.0f;
#pragma unroll 2
        for (int d4 = 0; d4 < HD / 4; ++d4) {
            const float* kr = kv + (4 * d4 + e) * 64 + 4 * kx;
            const float4 x = *reinterpret_cast<const float4*>(kr), y = *reinterpret_cast<const float4*>(kr + 32);
            const float kk[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
#pragma unroll
            for (int c = 0; c < WC; ++c) {
                const float q = qs[(c0 + c) * HD + 4 * d4 + e];
#pragma unroll
                for (int j = 0; j < 8; ++j) a[c][j] = fmaf(q, kk[j], a[c][j]);
            }
        }
        // Chains e and e ^ 1 added (lanes 8 apart), each lane keeping one tile's keys; then that and the other
        // pair's sum (lanes 16 apart), each lane keeping half the columns.
        float s1[WC][4];
#pragma unroll
        for (int c = 0; c < WC; ++c)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float got = __shfl_xor_sync(FULL_MASK, odd ? a[c][j] : a[c][j + 4], 8);
                s1[c][j] = (odd ? a[c][j + 4] : a[c][j]) + got;
            }
        float s2[HC][4];
#pragma unroll
        for (int c = 0; c < HC; ++c)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float got = __shfl_xor_sync(FULL_MASK, upper ? s1[c][j] : s1[c + HC][j], 16);
                s2[c][j] = (upper ? s1[c + HC][j] : s1[c][j]) + got;
            }
        const int tt = ta + odd, t0 = first + 32 * tt, k0 = t0 + 4 * kx;
        if (tt < T) {
#pragma unroll
            for (int c = 0; c < HC; ++c) {
                const int col = c0 + HC * upper + c, n = ncol[col];
                float4 s;
                s.x = k0 < n ? s2[c][0] * scale : NEG_INF;
                s.y = k0 + 1 < n ? s2[c][1] * scale : NEG_INF;
                s.z = k0 + 2 < n ? s2[c][2] * scale : NEG_INF;
                s.w = k0 + 3 < n ? s2[c][3] * scale : NEG_INF;
                reinterpret_cast<float4*>(ps + (tt * BQ + col) * 32)[kx] = s;
            }
        }
        __syncthreads();  // scores in; the keys may be overwritten
        block_tile_stats<BQ>(ps, tmax, tsum, ncol, ta, first + 32 * ta);
        if (tb < T) block_tile_stats<BQ>(ps, tmax, tsum, ncol, tb, first + 32 * tb);
    }
}
