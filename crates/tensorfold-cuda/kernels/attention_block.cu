// attention_block.cu: attention for the rows of one chain, which share their keys (a prompt chunk, a drafted
// chain), with the bits of attn_chunk (attention.cu): every score, tile statistic, value sum and merge below is
// the same chain of IEEE operations as there, so a row gets the same bits here as alone in a decode round.
//
// Why a second kernel: attn_chunk gives each (row, chunk) its own block, whose lanes load a key or a value for every
// one or two fmas, so a 16k-token prompt's attention ran at about a fifth of the H200's f32 rate (4.1 of 13.2 s of
// the 27B MLX4 prefill, call 69). Here a block takes up to 16·QT columns, a column being one (row, query head) of
// one kv head, for one chunk of 256 positions. Each tile of 32 keys (then of values) is loaded once into shared
// memory for all of them, and each thread computes a small tile of scores (2 keys × QT columns) and of value sums
// (QT columns × HD/16 dimensions) from registers.
//
// Grid (kv heads, ceil(rows / R), chunks), BT threads, dynamic shared memory (BlockShape::smem in attention.rs):
// rows row0 + R·blockIdx.y … (R = 16·QT / heads-per-kv-head), all of one slot with the same committed length and
// the same chain path root (the host checks this), so the key at each position is the same for all of them.

// The tile helpers (BlockSmem, tile loads, block_tile_stats) are in attention_tiles.cu, the passes of four lanes a
// score in attention_lanes.cu.

template <int HD, int QT, int KP, typename KV>
__device__ __forceinline__ void attn_block_run(const float* __restrict__ qr, const float* __restrict__ qg,
                                               const float* __restrict__ kround, const float* __restrict__ vround,
                                               float* __restrict__ out, float* __restrict__ part,
                                               const u64* __restrict__ tables, const int* __restrict__ meta,
                                               const int* __restrict__ paths, int heads, int kvh, int row0,
                                               int rows_end, int nch, int rr) {
    typedef BlockSmem<HD, QT, KP> L;
    constexpr int BQ = L::BQ;
    DYNAMIC_SMEM(smem);
    float* qs = reinterpret_cast<float*>(smem);
    float* ps = qs + L::Q;
    float* kv = ps + L::P;
    float* tmax = kv + L::KV;
    float* tsum = tmax + L::STAT;
    float* ew = tsum + L::STAT;
    float* cmaxs = ew + L::STAT;
    float* csum = cmaxs + BQ;
    __shared__ int ncol[BQ];                  // keys of each column's row (0: no such column)
    const int tid = threadIdx.x;
    const int gq = heads / kvh, R = BQ / gq, kh = blockIdx.x;
    const int i0 = row0 + R * blockIdx.y, c = blockIdx.z, first = c * ACH;
    const int rc = min(R, rows_end - i0), C = rc * gq;
    const int* m = meta + 5 * i0;  // slot, committed length and path are the same for every row of the block
    const int slot = m[0], clen = m[2];
    int nmax = 0, nmin = 1 << 30;
    for (int j = 0; j < rc; ++j) {
        const int n = clen + meta[5 * (i0 + j) + 4];
        nmax = max(nmax, n);
        nmin = min(nmin, n);
    }
    if (first >= nmax) return;
    const int T = min(ATILES, (nmax - first + 31) / 32);
    const int row = kvh * HD, off = kh * HD;
    const u64* pages = reinterpret_cast<const u64*>(tables[slot]);
    const float scale = 1.0f / sqrtf((float)HD);
    for (int col = tid; col < BQ; col += BT) ncol[col] = col < C ? clen + meta[5 * (i0 + col / gq) + 4] : 0;
    {
        // Queries of the columns, loaded in one batch: column j·gq + g is row i0 + j, head kh·gq + g.
        constexpr int QL = (BQ * (HD / 4) + BT - 1) / BT;
        float4 ql[QL];
#pragma unroll
        for (int k = 0; k < QL; ++k) {
            const int e = tid + BT * k, col = e / (HD / 4), d4 = e % (HD / 4);
            const int i = i0 + col / gq, h = kh * gq + col % gq;
            ql[k] = col < C ? reinterpret_cast<const float4*>(qr + ((size_t)i * heads + h) * HD)[d4]
                            : float4{0.0f, 0.0f, 0.0f, 0.0f};
        }
#pragma unroll
        for (int k = 0; k < QL; ++k)
            if (tid + BT * k < BQ * (HD / 4)) reinterpret_cast<float4*>(qs)[tid + BT * k] = ql[k];
    }

    // Pass 1, per tile: scores → tile max, weights p = exp(s − max) and their sum (attn_tile's steps).
    const int kx = tid & 15, cy = tid >> 4;  // KP keys from KP·kx on; columns cy + 16·q (pass 2: the same columns)
    if constexpr (KP == 8) {
        block_scores_lanes<HD, BQ, KV>(qs, ps, kv, tmax, tsum, ncol, T, first, nmax, clen, pages, kround, m, paths, rr,
                                       off, scale);
    } else if constexpr (KP == 2) {
        float kt[HD / 8];
        block_keys_load<HD, KV>(kt, first, nmax, clen, pages, kround, m, paths, rr, off);
        for (int tt = 0; tt < T; ++tt) {
            const int t0 = first + 32 * tt;
            block_keys_store<HD>(kt, kv);
            __syncthreads();  // keys in (and, from the second tile on, the previous tile's statistics done)
            if (tt + 1 < T) block_keys_load<HD, KV>(kt, t0 + 32, nmax, clen, pages, kround, m, paths, rr, off);
            float a[QT][2][4];
#pragma unroll
            for (int q = 0; q < QT; ++q)
#pragma unroll
                for (int k = 0; k < 2; ++k)
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[q][k][e] = 0.0f;
            const float4* q4 = reinterpret_cast<const float4*>(qs);
            const float2* k2 = reinterpret_cast<const float2*>(kv);
#pragma unroll 4
            for (int d4 = 0; d4 < HD / 4; ++d4) {
                float2 kk[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) kk[e] = k2[(4 * d4 + e) * 16 + kx];
#pragma unroll
                for (int q = 0; q < QT; ++q) {
                    const float4 qv = q4[(cy + 16 * q) * (HD / 4) + d4];
                    // a[.][k][e]: the chain of dimensions e, e + 4, … (tile_scores' a0 … a3), in order.
                    a[q][0][0] = fmaf(qv.x, kk[0].x, a[q][0][0]);
                    a[q][1][0] = fmaf(qv.x, kk[0].y, a[q][1][0]);
                    a[q][0][1] = fmaf(qv.y, kk[1].x, a[q][0][1]);
                    a[q][1][1] = fmaf(qv.y, kk[1].y, a[q][1][1]);
                    a[q][0][2] = fmaf(qv.z, kk[2].x, a[q][0][2]);
                    a[q][1][2] = fmaf(qv.z, kk[2].y, a[q][1][2]);
                    a[q][0][3] = fmaf(qv.w, kk[3].x, a[q][0][3]);
                    a[q][1][3] = fmaf(qv.w, kk[3].y, a[q][1][3]);
                }
            }
#pragma unroll
            for (int q = 0; q < QT; ++q) {
                const int col = cy + 16 * q, n = ncol[col];
                float2 s;
                s.x = t0 + 2 * kx < n ? block_score(a[q][0], scale) : NEG_INF;
                s.y = t0 + 2 * kx + 1 < n ? block_score(a[q][1], scale) : NEG_INF;
                reinterpret_cast<float2*>(ps + (tt * BQ + col) * 32)[kx] = s;
            }
            __syncthreads();  // scores in; the keys may be overwritten
            block_tile_stats<BQ>(ps, tmax, tsum, ncol, tt, t0);
        }
    } else {
        // Two tiles at a time (64 keys, [HD][64] in shared memory): thread (kx, cy) scores keys 4kx … 4kx + 3 of
        // the pair (tile kx / 8 of it) against columns cy + 16·q. Per 4 dimensions a warp then loads 7 float4s
        // for 48 fmas, where one tile at a time loads 4 float2s and 3 float4s for 24. Each score is the same four
        // chains, added the same way (block_score).
        static_assert(KP == 4, "keys a thread: 2, 4 or 8");
        const int half = kx >> 3, k0 = 4 * (kx & 7);
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
            float a[QT][4][4];
#pragma unroll
            for (int q = 0; q < QT; ++q)
#pragma unroll
                for (int k = 0; k < 4; ++k)
#pragma unroll
                    for (int e = 0; e < 4; ++e) a[q][k][e] = 0.0f;
            const float4* q4 = reinterpret_cast<const float4*>(qs);
            const float4* k4 = reinterpret_cast<const float4*>(kv);
#pragma unroll 2
            for (int d4 = 0; d4 < HD / 4; ++d4) {
                float4 kk[4];  // kk[e]: keys 4kx … 4kx + 3 at dimension 4·d4 + e
#pragma unroll
                for (int e = 0; e < 4; ++e) kk[e] = k4[(4 * d4 + e) * 16 + kx];
#pragma unroll
                for (int q = 0; q < QT; ++q) {
                    const float4 qv = q4[(cy + 16 * q) * (HD / 4) + d4];
                    const float qe[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        a[q][0][e] = fmaf(qe[e], kk[e].x, a[q][0][e]);
                        a[q][1][e] = fmaf(qe[e], kk[e].y, a[q][1][e]);
                        a[q][2][e] = fmaf(qe[e], kk[e].z, a[q][2][e]);
                        a[q][3][e] = fmaf(qe[e], kk[e].w, a[q][3][e]);
                    }
                }
            }
            const int tt = ta + half, t0 = first + 32 * tt;
            if (tt < T) {
#pragma unroll
                for (int q = 0; q < QT; ++q) {
                    const int col = cy + 16 * q, n = ncol[col];
                    float4 s;
                    s.x = t0 + k0 < n ? block_score(a[q][0], scale) : NEG_INF;
                    s.y = t0 + k0 + 1 < n ? block_score(a[q][1], scale) : NEG_INF;
                    s.z = t0 + k0 + 2 < n ? block_score(a[q][2], scale) : NEG_INF;
                    s.w = t0 + k0 + 3 < n ? block_score(a[q][3], scale) : NEG_INF;
                    reinterpret_cast<float4*>(ps + (tt * BQ + col) * 32)[kx & 7] = s;
                }
            }
            __syncthreads();  // scores in; the keys may be overwritten
            block_tile_stats<BQ>(ps, tmax, tsum, ncol, ta, first + 32 * ta);
            if (tb < T) block_tile_stats<BQ>(ps, tmax, tsum, ncol, tb, first + 32 * tb);
        }
    }
    __syncthreads();
    // The tiles against the chunk's max (attn_chunk_heads' merge), a thread per column.
    for (int col = tid; col < C; col += BT) {
        const int n = ncol[col];
        if (first >= n) continue;
        const int tiles = min(ATILES, (n - first + 31) / 32);
        float cmax = NEG_INF;
        for (int tt = 0; tt < tiles; ++tt) cmax = fmaxf(cmax, tmax[tt * BQ + col]);
        float cs = 0.0f;
        for (int tt = 0; tt < tiles; ++tt) {
            const float w = expf(tmax[tt * BQ + col] - cmax);
            ew[tt * BQ + col] = w;
            cs = fmaf(tsum[tt * BQ + col], w, cs);
        }
        cmaxs[col] = cmax;
        csum[col] = cs;
    }

    // Pass 2 (block_values): for KP 8 a warp takes six consecutive columns and its lanes a value row; else a thread
    // takes its QT columns cy + 16·q, and 16 threads a row.
    constexpr int WC = BQ / (BT / 32);  // columns a warp for KP 8
    if constexpr (KP == 8)
        block_values<HD, BQ, WC, 1, 32, KV>(WC * (tid >> 5), tid & 31, ps, kv, ew, cmaxs, csum, ncol, T, first, nmin,
                                            nmax, clen, pages, vround, m, paths, row, off, C, i0, gq, kh, heads, qg,
                                            out, part, row0, nch, c);
    else
        block_values<HD, BQ, QT, 16, 16, KV>(cy, tid & 15, ps, kv, ew, cmaxs, csum, ncol, T, first, nmin, nmax, clen,
                                             pages, vround, m, paths, row, off, C, i0, gq, kh, heads, qg, out, part,
                                             row0, nch, c);
}

// attn_block_d{HD}_q{QT}: HD the head_dim, 16·QT columns a block, scores 2 keys a thread. One block an SM at QT = 3
// (136 KB of shared memory at HD 256), two at QT = 2 (100 KB), so ptxas may give each thread up to 255 or 128
// registers. attn_block_d{HD}_q3k4: 48 columns, scores 4 keys a thread (two tiles at a time; 168 KB at HD 256).
// attn_block_d{HD}_q3k8: 48 columns, a chain of 8 keys' scores a lane (attention_lanes.cu; 168 KB at HD 256).
#define ATTN_BLOCK(HD, QT, KP, NAME, KV, SUFFIX)                                                                  \
    extern "C" __global__ void __launch_bounds__(BT, QT == 2 && KP == 2 ? 2 : 1) NAME##SUFFIX(                  \
        const float* qr, const float* qg, const float* kround, const float* vround, float* out, float* part,    \
        const u64* tables, const int* meta, const int* paths, int heads, int kvh, int row0, int rows_end,       \
        int nch, int rr) {                                                                                       \
        kernel_entry();                                                                                          \
        attn_block_run<HD, QT, KP, KV>(qr, qg, kround, vround, out, part, tables, meta, paths, heads, kvh, row0, \
                                       rows_end, nch, rr);                                                       \
    }
#define ATTN_BLOCK_KV(HD, QT, KP, NAME) ATTN_BLOCK(HD, QT, KP, NAME, float, ) ATTN_BLOCK(HD, QT, KP, NAME, u16, _kvbf16)
#define ATTN_BLOCK_QT(HD)                                                               \
    ATTN_BLOCK_KV(HD, 2, 2, attn_block_d##HD##_q2) ATTN_BLOCK_KV(HD, 3, 2, attn_block_d##HD##_q3) \
        ATTN_BLOCK_KV(HD, 3, 4, attn_block_d##HD##_q3k4) ATTN_BLOCK_KV(HD, 3, 8, attn_block_d##HD##_q3k8)
ATTN_BLOCK_QT(32)
ATTN_BLOCK_QT(64)
ATTN_BLOCK_QT(128)
ATTN_BLOCK_QT(256)
