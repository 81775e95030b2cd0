// attention_tiles.cu: the pieces every shape of attn_block (attention_block.cu) shares: shared-memory sizes, the tile
// loads from pages to registers to shared memory, attn_tile's max, weights and sum, and pass 2's value sums and
// partials (the bits of attn_chunk in attention.cu). Compiled before attention_lanes.cu and attention_block.cu.

#define BT 256  // threads of an attn_block block (8 warps: the tile loads below count on it)

// Floats of each region (the host mirrors this: attention.rs BlockShape::smem). KP is the keys a thread scores (2:
// one tile of 32 keys at a time; 4: two tiles, 64 keys, at a time; 8: two tiles, one chain of each score a lane,
// attention_lanes.cu).
template <int HD, int QT, int KP>
struct BlockSmem {
    static constexpr int BQ = 16 * QT;            // columns
    static constexpr int Q = BQ * HD;             // queries [BQ][HD]
    static constexpr int P = ATILES * BQ * 32;    // scores, then weights [ATILES][BQ][32]
    static constexpr int KV = (KP == 2 ? 32 : 64) * HD;  // keys [HD][32 or 64] (tiles side by side) or values [32][HD]
    static constexpr int STAT = ATILES * BQ;      // tile maxima, tile sums, merge weights, each [ATILES][BQ]
    static constexpr int FLOATS = Q + P + KV + 3 * STAT + 2 * BQ;  // + the chunk maxima and sums [BQ] each
};

// Values of key u of the tile in shared memory ([32][HD]) at this thread's dimensions VEC·(x + XS·v) … + VEC − 1.
template <int HD, int VEC, int NV, int XS>
__device__ __forceinline__ void block_value_load(const float* kv, int u, int x, float (&vv)[NV][VEC]) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        const float* p = kv + u * HD + VEC * (x + XS * v);
        if constexpr (VEC == 4) {
            const float4 w = *reinterpret_cast<const float4*>(p);
            vv[v][0] = w.x;
            vv[v][1] = w.y;
            vv[v][2] = w.z;
            vv[v][3] = w.w;
        } else if constexpr (VEC == 2) {
            const float2 w = *reinterpret_cast<const float2*>(p);
            vv[v][0] = w.x;
            vv[v][1] = w.y;
        } else {
            vv[v][0] = p[0];
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

// Column col's result for its chunk c from this thread's value sums acc, at dimensions VEC·(x + XS·v) + e: the
// partials for attn_merge (the chunk's max and sum written by the thread with x = 0, then the sums), or, for a row
// with one chunk, the output (attn_merge's arithmetic for one chunk). Nothing for a column past the block's C or
// without keys in the chunk.
template <int HD, int NV, int VEC, int XS>
__device__ __forceinline__ void block_column_out(const float (&acc)[NV][VEC], int x, int col, int C, const int* ncol,
                                                 int first, int i0, int gq, int kh, int heads, const float* cmaxs,
                                                 const float* csum, const float* __restrict__ qg,
                                                 float* __restrict__ out, float* __restrict__ part, int row0, int nch,
                                                 int c) {
    if (col >= C) return;
    const int n = ncol[col];
    if (first >= n) return;
    const int i = i0 + col / gq, h = kh * gq + col % gq;
    const float* gate = qg + (size_t)i * heads * 2 * HD + (size_t)h * 2 * HD + HD;
    float* pp = part + (((size_t)(i - row0) * heads + h) * nch + c) * (HD + 2);
    const bool single = n <= ACH;
    if (!single && x == 0) {
        pp[0] = cmaxs[col];
        pp[1] = csum[col];
    }
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const int d = VEC * (x + XS * v) + e;
            if (single)
                out[(size_t)i * heads * HD + (size_t)h * HD + d] = (acc[v][e] / csum[col]) * sigmoid_f(gate[d]);
            else
                pp[2 + d] = acc[v][e];
        }
}

// Pass 2: the chunk's value sums (tile_values per tile, folded by the merge weights ew in tile order) of this
// thread's NC columns cb + CS·q at dimensions VEC·(x + XS·v) + e, then their partials or outputs
// (block_column_out). The shapes of attention_block.cu take 3 columns 16 apart and 16 threads along a value row
// (XS 16); attention_lanes.cu's take a warp's 6 consecutive columns and its 32 lanes along a row (XS 32). Each sum
// is the same chain over a tile's keys in order, whichever thread holds it.
template <int HD, int BQ, int NC, int CS, int XS, typename KV>
__device__ __forceinline__ void block_values(int cb, int x, const float* ps, float* kv, const float* ew,
                                             const float* cmaxs, const float* csum, const int* ncol, int T, int first,
                                             int nmin, int nmax, int clen, const u64* pages, const float* vround,
                                             const int* m, const int* paths, int row, int off, int C, int i0, int gq,
                                             int kh, int heads, const float* qg, float* out, float* part, int row0,
                                             int nch, int c) {
    constexpr int VEC = HD / XS < 4 ? HD / XS : 4;  // dimensions a value load carries
    constexpr int NV = HD / (XS * VEC);             // value loads a thread makes per key
    float acc[NC][NV][VEC];
#pragma unroll
    for (int q = 0; q < NC; ++q)
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
        int cnt[NC];
#pragma unroll
        for (int q = 0; q < NC; ++q) cnt[q] = min(32, max(0, ncol[cb + CS * q] - t0));
        float o[NC][NV][VEC];
#pragma unroll
        for (int q = 0; q < NC; ++q)
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
                block_value_load<HD, VEC, NV, XS>(kv, u, x, vv);
#pragma unroll
                for (int q = 0; q < NC; ++q) {
                    const float p = pt[(cb + CS * q) * 32 + u];
#pragma unroll
                    for (int v = 0; v < NV; ++v)
#pragma unroll
                        for (int e = 0; e < VEC; ++e) o[q][v][e] = fmaf(p, vv[v][e], o[q][v][e]);
                }
            }
        } else {
            for (int u = 0; u < 32; ++u) {
                float vv[NV][VEC];
                block_value_load<HD, VEC, NV, XS>(kv, u, x, vv);
#pragma unroll
                for (int q = 0; q < NC; ++q) {
                    if (u >= cnt[q]) continue;
                    const float p = pt[(cb + CS * q) * 32 + u];
#pragma unroll
                    for (int v = 0; v < NV; ++v)
#pragma unroll
                        for (int e = 0; e < VEC; ++e) o[q][v][e] = fmaf(p, vv[v][e], o[q][v][e]);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < NC; ++q) {
            if (cnt[q] == 0) continue;  // no such tile for this column
            const float w = ew[tt * BQ + cb + CS * q];
#pragma unroll
            for (int v = 0; v < NV; ++v)
#pragma unroll
                for (int e = 0; e < VEC; ++e) acc[q][v][e] = fmaf(o[q][v][e], w, acc[q][v][e]);
        }
    }
#pragma unroll
    for (int q = 0; q < NC; ++q)
        block_column_out<HD, NV, VEC, XS>(acc[q], x, cb + CS * q, C, ncol, first, i0, gq, kh, heads, cmaxs, csum, qg,
                                          out, part, row0, nch, c);
}
