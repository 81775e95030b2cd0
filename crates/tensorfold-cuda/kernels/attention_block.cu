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

#define BT 256  // threads of an attn_block block (8 warps: the tile loads below count on it)

// Floats of each region (the host mirrors this: attention.rs BlockShape::smem). KP is the keys a thread scores (2:
// one tile of 32 keys at a time; 4: two tiles, 64 keys, at a time).
template <int HD, int QT, int KP>
struct BlockSmem {
    static constexpr int BQ = 16 * QT;            // columns
    static constexpr int Q = BQ * HD;             // queries [BQ][HD]
    static constexpr int P = ATILES * BQ * 32;    // scores, then weights [ATILES][BQ][32]
    static constexpr int KV = 16 * KP * HD;       // keys [HD][16·KP] (KP / 2 tiles side by side) or values [32][HD]
    static constexpr int STAT = ATILES * BQ;      // tile maxima, tile sums, merge weights, each [ATILES][BQ]
    static constexpr int FLOATS = Q + P + KV + 3 * STAT + 2 * BQ;  // + the chunk maxima and sums [BQ] each
};

// Values of key u of the tile in shared memory ([32][HD]) at this thread's dimensions VEC·(dx + 16·v) … + VEC − 1.
template <int HD, int VEC, int NV>
__device__ __forceinline__ void block_value_load(const float* kv, int u, int dx, float (&vv)[NV][VEC]) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        if constexpr (VEC == 4) {
            const float4 x = reinterpret_cast<const float4*>(kv + u * HD)[dx + 16 * v];
            vv[v][0] = x.x;
            vv[v][1] = x.y;
            vv[v][2] = x.z;
            vv[v][3] = x.w;
        } else {
            const float2 x = reinterpret_cast<const float2*>(kv + u * HD)[dx + 16 * v];
            vv[v][0] = x.x;
            vv[v][1] = x.y;
        }
    }
}

// Tiles travel global → registers → shared memory: a thread issues all its loads of the next tile at once, before
// the current tile's arithmetic, and stores them after it (the first version loaded and stored one element at a
// time, so every load waited a whole memory latency: 5.4 s of attention in the 16k prefill against attn_chunk's
// 4.1, call 73). Keys: thread (lane, warp) loads key t0 + lane, its dimension groups warp, warp + 8, … (KG
// dimensions each: attention.cu key_index), kt[KG·i + e] = dimension KG·(warp + 8i) + e.
template <int HD, typename KV>
__device__ __forceinline__ void block_keys_load(float (&kt)[HD / 8], int t0, int nmax, int clen, const u64* pages,
                                                const float* kround, const int* m, const int* paths, int rr,
                                                int off) {
    static_assert(HD / 8 == KG * (HD / (8 * KG)), "a thread's groups fill kt");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int t = t0 + lane;
    if (t < nmax && t < clen) {
        // A committed key from its page (bf16 pages widened); a round key (rounded by attn_prep for bf16) below.
        const KV* kp = reinterpret_cast<const KV*>(pages[t / PAGE]) + key_index(off, t);
#pragma unroll
        for (int i = 0; i < HD / (8 * KG); ++i) {
            const float4 g = key_group(kp + (size_t)(warp + 8 * i) * KG * PAGE);
            kt[KG * i] = g.x;
            kt[KG * i + 1] = g.y;
            kt[KG * i + 2] = g.z;
            kt[KG * i + 3] = g.w;
        }
        return;
    }
    const float* kp = t < nmax ? kround + (size_t)off * rr + path_at(m, paths, t - clen) : nullptr;
#pragma unroll
    for (int i = 0; i < HD / (8 * KG); ++i)
#pragma unroll
        for (int e = 0; e < KG; ++e)
            kt[KG * i + e] = kp != nullptr ? kp[(size_t)(KG * (warp + 8 * i) + e) * rr] : 0.0f;
}

// A tile of keys into rows of `width` keys ([HD][width]), at column `at` of each.
template <int HD>
__device__ __forceinline__ void block_keys_store(const float (&kt)[HD / 8], float* kv, int width = 32, int at = 0) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < HD / (8 * KG); ++i)
#pragma unroll
        for (int e = 0; e < KG; ++e) kv[(KG * (warp + 8 * i) + e) * width + at + lane] = kt[KG * i + e];
}

// Values [32][HD] as float4s: thread tid takes float4s tid, tid + BT, … of the tile.
template <int HD, typename KV>
__device__ __forceinline__ void block_values_load(float4 (&vt)[HD / 32], int t0, int nmax, int clen,
                                                  const u64* pages, const float* vround, const int* m,
                                                  const int* paths, int row, int off) {
#pragma unroll
    for (int i = 0; i < HD / 32; ++i) {
        const int e = threadIdx.x + BT * i, u = e / (HD / 4), d4 = e % (HD / 4), t = t0 + u;
        if constexpr (sizeof(KV) == 2) {
            // bf16 pages: four values (8 bytes; row and off are multiples of 4) widened; a round row's rounded.
            if (t < nmax && t < clen) {
                const uint2 w = reinterpret_cast<const uint2*>(reinterpret_cast<const KV*>(pages[t / PAGE]) +
                                                               (size_t)(PAGE + t % PAGE) * row + off)[d4];
                vt[i] = float4{__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u),
                               __uint_as_float(w.y << 16), __uint_as_float(w.y & 0xffff0000u)};
            } else if (t < nmax) {
                const float4 x =
                    reinterpret_cast<const float4*>(value_row(t, clen, pages, vround, m, paths, row, off))[d4];
                vt[i] = float4{kv_of<KV>(x.x), kv_of<KV>(x.y), kv_of<KV>(x.z), kv_of<KV>(x.w)};
            } else {
                vt[i] = float4{0.0f, 0.0f, 0.0f, 0.0f};
            }
        } else {
            vt[i] = t < nmax
                        ? reinterpret_cast<const float4*>(value_row(t, clen, pages, vround, m, paths, row, off))[d4]
                        : float4{0.0f, 0.0f, 0.0f, 0.0f};
        }
    }
}

template <int HD>
__device__ __forceinline__ void block_values_store(const float4 (&vt)[HD / 32], float* kv) {
#pragma unroll
    for (int i = 0; i < HD / 32; ++i) reinterpret_cast<float4*>(kv)[threadIdx.x + BT * i] = vt[i];
}

// A score from its four chains (tile_scores' a0 … a3): (a0 + a1) + (a2 + a3), scaled.
__device__ __forceinline__ float block_score(const float (&a)[4], float scale) {
    return ((a[0] + a[1]) + (a[2] + a[3])) * scale;
}

// Tile tt's statistics from its scores in ps, for every column: a lane per key, a warp per column, attn_tile's max,
// weights (written over the scores) and butterfly sum (warp_max and warp_sum's steps); the max and sum go to tmax
// and tsum for columns with keys in the tile. A warp takes its WC columns side by side, so their shuffles overlap:
// one after another, each column's chain of ten shuffles and an exp stood between the tile's scores and its values.
template <int BQ>
__device__ __forceinline__ void block_tile_stats(float* ps, float* tmax, float* tsum, const int* ncol, int tt, int t0) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int WC = BQ / (BT / 32);
    float sc[WC], mx[WC], sm[WC];
#pragma unroll
    for (int k = 0; k < WC; ++k) {
        sc[k] = ps[(tt * BQ + warp + 8 * k) * 32 + lane];
        mx[k] = sc[k];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < WC; ++k) mx[k] = fmaxf(mx[k], __shfl_xor_sync(FULL_MASK, mx[k], o));
#pragma unroll
    for (int k = 0; k < WC; ++k) sm[k] = t0 + lane < ncol[warp + 8 * k] ? expf(sc[k] - mx[k]) : 0.0f;
#pragma unroll
    for (int k = 0; k < WC; ++k) ps[(tt * BQ + warp + 8 * k) * 32 + lane] = sm[k];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int k = 0; k < WC; ++k) sm[k] += __shfl_xor_sync(FULL_MASK, sm[k], o);
    if (lane == 0) {
#pragma unroll
        for (int k = 0; k < WC; ++k) {
            const int col = warp + 8 * k;
            if (t0 < ncol[col]) {  // else the tile is past this row's keys (or there is no such column)
                tmax[tt * BQ + col] = mx[k];
                tsum[tt * BQ + col] = sm[k];
            }
        }
    }
}

template <int HD, int QT, int KP, typename KV>
__device__ __forceinline__ void attn_block_run(const float* __restrict__ qr, const float* __restrict__ qg,
                                               const float* __restrict__ kround, const float* __restrict__ vround,
                                               float* __restrict__ out, float* __restrict__ part,
                                               const u64* __restrict__ tables, const int* __restrict__ meta,
                                               const int* __restrict__ paths, int heads, int kvh, int row0,
                                               int rows_end, int nch, int rr) {
    typedef BlockSmem<HD, QT, KP> L;
    constexpr int BQ = L::BQ;
    constexpr int VEC = HD >= 64 ? 4 : 2;   // dimensions a value load carries
    constexpr int NV = HD / (16 * VEC);     // value loads a thread makes per key
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
    if constexpr (KP == 2) {
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
        static_assert(KP == 4, "keys a thread: 2 or 4");
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

    // Pass 2, per tile: value sums from zero (tile_values), folded into the chunk's sums in tile order.
    const int dx = tid & 15;  // dimensions VEC·(dx + 16·v) … + VEC − 1, v < NV
    float acc[QT][NV][VEC];
#pragma unroll
    for (int q = 0; q < QT; ++q)
#pragma unroll
        for (int v = 0; v < NV; ++v)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[q][v][e] = 0.0f;
    float4 vt[HD / 32];
    block_values_load<HD, KV>(vt, first, nmax, clen, pages, vround, m, paths, row, off);
    for (int tt = 0; tt < T; ++tt) {
        const int t0 = first + 32 * tt;
        __syncthreads();  // the merge weights are in and the previous tile's values are read
        block_values_store<HD>(vt, kv);
        __syncthreads();
        if (tt + 1 < T) block_values_load<HD, KV>(vt, t0 + 32, nmax, clen, pages, vround, m, paths, row, off);
        int cnt[QT];
#pragma unroll
        for (int q = 0; q < QT; ++q) cnt[q] = min(32, max(0, ncol[cy + 16 * q] - t0));
        float o[QT][NV][VEC];
#pragma unroll
        for (int q = 0; q < QT; ++q)
#pragma unroll
            for (int v = 0; v < NV; ++v)
#pragma unroll
                for (int e = 0; e < VEC; ++e) o[q][v][e] = 0.0f;
        const float* pt = ps + tt * BQ * 32;
        if (t0 + 32 <= nmin) {
            // Every column has all 32 keys of the tile: no per-key bounds.
#pragma unroll 2
            for (int u = 0; u < 32; ++u) {
                float vv[NV][VEC];
                block_value_load<HD, VEC, NV>(kv, u, dx, vv);
#pragma unroll
                for (int q = 0; q < QT; ++q) {
                    const float p = pt[(cy + 16 * q) * 32 + u];
#pragma unroll
                    for (int v = 0; v < NV; ++v)
#pragma unroll
                        for (int e = 0; e < VEC; ++e) o[q][v][e] = fmaf(p, vv[v][e], o[q][v][e]);
                }
            }
        } else {
            for (int u = 0; u < 32; ++u) {
                float vv[NV][VEC];
                block_value_load<HD, VEC, NV>(kv, u, dx, vv);
#pragma unroll
                for (int q = 0; q < QT; ++q) {
                    if (u >= cnt[q]) continue;
                    const float p = pt[(cy + 16 * q) * 32 + u];
#pragma unroll
                    for (int v = 0; v < NV; ++v)
#pragma unroll
                        for (int e = 0; e < VEC; ++e) o[q][v][e] = fmaf(p, vv[v][e], o[q][v][e]);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < QT; ++q) {
            if (cnt[q] == 0) continue;  // no such tile for this column
            const float w = ew[tt * BQ + cy + 16 * q];
#pragma unroll
            for (int v = 0; v < NV; ++v)
#pragma unroll
                for (int e = 0; e < VEC; ++e) acc[q][v][e] = fmaf(o[q][v][e], w, acc[q][v][e]);
        }
    }
    // The chunk's partials, or the output of a row with one chunk (attn_merge's arithmetic for one chunk).
    const int hdr = HD + 2;
#pragma unroll
    for (int q = 0; q < QT; ++q) {
        const int col = cy + 16 * q;
        if (col >= C) continue;
        const int n = ncol[col];
        if (first >= n) continue;
        const int i = i0 + col / gq, h = kh * gq + col % gq;
        const float* gate = qg + (size_t)i * heads * 2 * HD + (size_t)h * 2 * HD + HD;
        float* pp = part + (((size_t)(i - row0) * heads + h) * nch + c) * hdr;
        const bool single = n <= ACH;
        if (!single && dx == 0) {
            pp[0] = cmaxs[col];
            pp[1] = csum[col];
        }
#pragma unroll
        for (int v = 0; v < NV; ++v)
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const int d = VEC * (dx + 16 * v) + e;
                if (single)
                    out[(size_t)i * heads * HD + (size_t)h * HD + d] = (acc[q][v][e] / csum[col]) * sigmoid_f(gate[d]);
                else
                    pp[2 + d] = acc[q][v][e];
            }
    }
}

// attn_block_d{HD}_q{QT}: HD the head_dim, 16·QT columns a block, scores 2 keys a thread. One block an SM at QT = 3
// (136 KB of shared memory at HD 256), two at QT = 2 (100 KB), so ptxas may give each thread up to 255 or 128
// registers. attn_block_d{HD}_q3k4: 48 columns, scores 4 keys a thread (two tiles at a time; 168 KB at HD 256).
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
        ATTN_BLOCK_KV(HD, 3, 4, attn_block_d##HD##_q3k4)
ATTN_BLOCK_QT(32)
ATTN_BLOCK_QT(64)
ATTN_BLOCK_QT(128)
ATTN_BLOCK_QT(256)
