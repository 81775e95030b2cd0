// attention.cu: gated full attention over a round. Keys of a row: the slot's committed rows (16-row pages) then the
// row's ancestors in the round, in position order, split at fixed positions (tiles of 32, chunks of ACH) whose
// partials merge in position order, so a row's bits depend only on its own keys, never on the rest of the round.
// Row metadata: `path_at` in common.cu.

#define AW 1        // warps per block, one (row, head) each (spread over SMs)
#define HDMAX 256   // largest head_dim
// Positions per KV page: keys then values. Keys are stored by dimension in groups of KG consecutive dimensions,
// [kv_heads·head_dim / KG][PAGE][KG] (key_index), so a lane (one key) reads KG dimensions of its key in one load
// (16 bytes of f32, 8 of bf16) and the 16 keys of a page lie side by side; values by position,
// [PAGE][kv_heads·head_dim] (a lane takes neighbouring dimensions of a value row). With one dimension a load (keys
// [kv_heads·head_dim][PAGE] before), a 32k-context decode round's attention waited on 16 loads in turn per tile of
// 32 keys; a group load carries 4 dimensions in the registers one did, and a bf16 group twice the dimensions an f32
// one does in the same registers.
#define PAGE 16
#define KG 4

// Where dimension c (of the page's row, kv_heads·head_dim) of key t (its position; t % PAGE on its page) is.
__device__ __forceinline__ size_t key_index(int c, int t) {
    return ((size_t)(c / KG) * PAGE + t % PAGE) * KG + c % KG;
}

// KG = 4 consecutive elements of a page as loaded (group_ld: 16 bytes of f32, 8 of bf16), and widened to f32
// (widen; bf16 element 2i is the low half of word i). Loads keep the raw form until the arithmetic needs it, so a
// bf16 group holds 2 registers in flight, not 4.
template <typename KV> struct Group { typedef float4 raw; };
template <> struct Group<u16> { typedef uint2 raw; };
__device__ __forceinline__ float4 group_ld(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ uint2 group_ld(const u16* p) { return *reinterpret_cast<const uint2*>(p); }
__device__ __forceinline__ float4 widen(float4 v) { return v; }
__device__ __forceinline__ float4 widen(uint2 w) {
    return float4{__uint_as_float(w.x << 16), __uint_as_float(w.x & 0xffff0000u), __uint_as_float(w.y << 16),
                  __uint_as_float(w.y & 0xffff0000u)};
}
template <typename KV>
__device__ __forceinline__ float4 key_group(const KV* p) { return widen(group_ld(p)); }

// A page's element: f32, or bf16 bits (u16) under `--kv-cache-dtype bf16` (the `_kvbf16` kernels). kv_ld reads one
// as f32. kv_of gives a round row's f32 value as a page of that type holds it: keys are rounded where attn_prep
// makes them, values where they are read, so a key or value is the same number whether its row is committed or
// still in its round, and every path (plain, drafted, chunked, resumed) sees the same keys.
__device__ __forceinline__ float kv_ld(const float* p) { return *p; }
__device__ __forceinline__ float kv_ld(const u16* p) { return bf16_to_f32(*p); }
// Stores x into a page element: as is, or rounded to bf16 (round to nearest even).
__device__ __forceinline__ void kv_st(float* p, float x) { *p = x; }
__device__ __forceinline__ void kv_st(u16* p, float x) { *p = f32_to_bf16_rn(x); }
template <typename KV>
__device__ __forceinline__ float kv_of(float x) {
    if constexpr (sizeof(KV) == 2) return bf16_to_f32(f32_to_bf16_rn(x));
    return x;
}

// In-place RMSNorm (weights `nw`) then NeoX RoPE on the first `rd` dims of one head vector in shared memory.
__device__ __forceinline__ void norm_rope_warp(float* v, const float* __restrict__ nw, int hd, int rd, int pos,
                                               double theta, float eps) {
    const int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int d = lane; d < hd; d += 32) ss = fmaf(v[d], v[d], ss);
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)hd + eps);
    __syncwarp();
    for (int d = lane; d < hd; d += 32) v[d] = (v[d] * inv) * nw[d];
    __syncwarp();
    const int half = rd / 2;
    for (int j = lane; j < half; j += 32) {
        const double inv_freq = pow(theta, -(2.0 * (double)j) / (double)rd);
        const double angle = (double)pos * inv_freq;
        const float sn = (float)sin(angle), cs = (float)cos(angle);
        const float x1 = v[j], x2 = v[j + half];
        v[j] = x1 * cs - x2 * sn;
        v[j + half] = x2 * cs + x1 * sn;
    }
    __syncwarp();
}

// Normed, rotated keys and queries of the round, one warp per (row, head): blocks x < kvh take key head x of
// k [R, kvh·hd] into kout, by dimension ([kvh·hd][R], R = gridDim.y; a page groups 4 dimensions, key_index;
// rounded to bf16 when kv_bf16 != 0, as the pages will hold them); the others query head
// x − kvh of qg [R, heads·2·hd] (per head: query | gate) into qout [R, heads·hd], so the chunk blocks of a row
// share one rotated query.
extern "C" __global__ void __launch_bounds__(AW * 32)
    attn_prep(const float* __restrict__ k, float* __restrict__ kout, const float* __restrict__ kn,
              const float* __restrict__ qg, float* __restrict__ qout, const float* __restrict__ qn,
              const int* __restrict__ meta, int kvh, int heads, int hd, int rd, double theta, float eps,
              int kv_bf16) {
    kernel_entry();
    __shared__ __align__(16) float ks[AW][HDMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = blockIdx.x * AW + warp, i = blockIdx.y;
    if (h >= kvh + heads) return;
    const bool key = h < kvh;
    const float* src = key ? k + ((size_t)i * kvh + h) * hd : qg + ((size_t)i * heads + (h - kvh)) * 2 * hd;
    float* v = ks[warp];
    for (int d = lane; d < hd; d += 32) v[d] = src[d];
    __syncwarp();
    norm_rope_warp(v, key ? kn : qn, hd, rd, meta[5 * i + 1], theta, eps);
    if (key) {
        for (int d = lane; d < hd; d += 32)
            kout[((size_t)h * hd + d) * gridDim.y + i] = kv_bf16 ? kv_of<u16>(v[d]) : v[d];
    } else {
        float* dst = qout + ((size_t)i * heads + (h - kvh)) * hd;
        for (int d = lane; d < hd; d += 32) dst[d] = v[d];
    }
}

// Dimension `off` (a multiple of KG) of key t: a committed one in its f32 page, else its round row in kround
// [kvh·hd][rr]. Dimensions off + KG·d + e follow at d·s4 + e·s1 floats.
__device__ __forceinline__ const float* key_col(int t, int clen, const u64* pages, const float* kround,
                                                const int* m, const int* paths, int rr, int off, int& s1, int& s4) {
    if (t < clen) {
        s1 = 1;
        s4 = KG * PAGE;
        return reinterpret_cast<const float*>(pages[t / PAGE]) + key_index(off, t);
    }
    s1 = rr;
    s4 = KG * rr;
    return kround + (size_t)off * rr + path_at(m, paths, t - clen);
}

__device__ __forceinline__ const float* value_row(int t, int clen, const u64* pages, const float* vround,
                                                  const int* m, const int* paths, int row, int off) {
    if (t < clen) return reinterpret_cast<const float*>(pages[t / PAGE]) + (size_t)(PAGE + t % PAGE) * row + off;
    return vround + (size_t)path_at(m, paths, t - clen) * row + off;
}

// The keys of a row are split at fixed positions: tiles of 32 (one warp each: scores, their max, exp-sums and
// value sums in key order), chunks of ACH positions (one block: its tiles merged in tile order against the chunk's
// max) and the chunks merged in chunk order against the row's max. Every boundary is a position, so a row's bits
// depend on its own keys alone (never on the round's rows, its slots or how many chunks the launch holds), and the
// chunks of a long context run on many SMs at once.
#define ACH 256              // positions per chunk (one block)
#define ATILES (ACH / 32)    // tiles per chunk
#define AWARPS 8             // warps per chunk block: one tile each

// One step of a key's four score chains: dimensions 4d … 4d + 3 of each head's query against the key's.
template <int G>
__device__ __forceinline__ void score_step(const float4* const (&q)[G], int d, float4 kv, float (&a0)[G],
                                           float (&a1)[G], float (&a2)[G], float (&a3)[G]) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const float4 qv = q[g][d];
        a0[g] = fmaf(qv.x, kv.x, a0[g]);
        a1[g] = fmaf(qv.y, kv.y, a1[g]);
        a2[g] = fmaf(qv.z, kv.z, a2[g]);
        a3[g] = fmaf(qv.w, kv.w, a3[g]);
    }
}

// Scores of one tile for G query heads of one kv head: lane l takes key t0 + l (NEG_INF from n on), s[g] =
// ((a0 + a1) + (a2 + a3))·scale with a_c the fmaf chain of q[g]·k over dimensions c, c + 4, …, in order. A tile
// of committed keys (the bulk of a long context) loads a group of 4 dimensions at a time, at immediate offsets from
// one pointer: the generic path spends about as many instructions on addresses as on products (232 against 164 per
// 8 steps of 4 dimensions, SASS of call 66; prefill of 16k tokens 13% faster). The chains are the same on both
// paths, so the bits are (the backend-ops test compares rows whose keys are committed with the same rows whose keys
// are all in the round).
template <int G, typename KV>
__device__ __forceinline__ void tile_scores(const float4* const (&q)[G], int t0, int n, int clen,
                                            const u64* pages, const float* kround, const int* m, const int* paths,
                                            int rr, int off, int hd, float scale, float (&s)[G]) {
    const int t = t0 + (threadIdx.x & 31);
#pragma unroll
    for (int g = 0; g < G; ++g) s[g] = NEG_INF;
    if (t >= n) return;
    float a0[G], a1[G], a2[G], a3[G];
#pragma unroll
    for (int g = 0; g < G; ++g) a0[g] = a1[g] = a2[g] = a3[g] = 0.0f;
    if (t0 + 32 <= clen || (sizeof(KV) == 2 && t < clen)) {
        // (bf16 pages: also a committed key of a tile that holds round rows, which key_col cannot point at.)
        const KV* kp = reinterpret_cast<const KV*>(pages[t / PAGE]) + key_index(off, t);
        // As many groups in flight as about 32 registers hold as loaded: 8 of f32, 16 of bf16.
#pragma unroll(sizeof(KV) == 2 ? 16 : 8)
        for (int d = 0; d < hd / 4; ++d) score_step<G>(q, d, key_group(kp + (size_t)d * KG * PAGE), a0, a1, a2, a3);
    } else {
        int s1, s4;
        const float* kp = key_col(t, clen, pages, kround, m, paths, rr, off, s1, s4);
#pragma unroll 8
        for (int d = 0; d < hd / 4; ++d) {
            float4 kv;
            kv.x = kp[0];
            kv.y = kp[s1];
            kv.z = kp[2 * s1];
            kv.w = kp[3 * s1];
            kp += s4;
            score_step<G>(q, d, kv, a0, a1, a2, a3);
        }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) s[g] = ((a0[g] + a1[g]) + (a2[g] + a3[g])) * scale;
}

// The dimension a lane's value sum o[.][j] is for: lane + 32j on tile_values' generic path; on its whole-tile path
// (`wide`) 4·lane + j and 128 + 4·lane + j − 4, so that a lane loads 4 dimensions of a value row at once.
__device__ __forceinline__ int value_dim(int lane, int j, bool wide) {
    return wide ? (j < 4 ? 4 * lane + j : 128 + 4 * lane + (j - 4)) : lane + 32 * j;
}

// Value sums of one tile for G heads: o[g][j] = Σ_u p_u·v_u[value_dim(lane, j, wide)] over its keys u = 0 … cnt − 1
// in key order (p_u is lane u's p[g]). A whole tile of committed keys at the largest head_dim takes a path with no
// per-key or per-dimension bounds that loads 4 dimensions at once (two pages, 16 keys each; returns true); the sums
// are the same chains on both paths, only which lane holds a dimension differs.
template <int G, typename KV>
__device__ __forceinline__ bool tile_values(const float (&p)[G], int t0, int cnt, int clen, const u64* pages,
                                            const float* vround, const int* m, const int* paths, int row, int off,
                                            int hd, float (&o)[G][HDMAX / 32]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int j = 0; j < HDMAX / 32; ++j) o[g][j] = 0.0f;
    if (cnt == 32 && t0 + 32 <= clen && hd == HDMAX) {
        // Keys a batch: as many as 32 registers hold as loaded (4 of f32 values, 8 of bf16 ones), but 4 for three
        // heads' sums (attn_chunk_g3_kvbf16 spilled 296 bytes with 8 in 80 registers).
        constexpr int KB = sizeof(KV) == 2 && G < 3 ? 8 : 4;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const KV* base = reinterpret_cast<const KV*>(pages[t0 / PAGE + half]) + (size_t)PAGE * row + off + 4 * lane;
#pragma unroll 1
            for (int u0 = 0; u0 < PAGE; u0 += KB) {
                typename Group<KV>::raw raw[KB][2];
#pragma unroll
                for (int k = 0; k < KB; ++k) {
                    const KV* vp = base + (size_t)(u0 + k) * row;
                    raw[k][0] = group_ld(vp);
                    raw[k][1] = group_ld(vp + 128);
                }
#pragma unroll
                for (int g = 0; g < G; ++g)
#pragma unroll
                    for (int k = 0; k < KB; ++k) {
                        const float pu = __shfl_sync(FULL_MASK, p[g], half * PAGE + u0 + k);
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const float4 v = widen(raw[k][h]);
                            o[g][4 * h] = fmaf(pu, v.x, o[g][4 * h]);
                            o[g][4 * h + 1] = fmaf(pu, v.y, o[g][4 * h + 1]);
                            o[g][4 * h + 2] = fmaf(pu, v.z, o[g][4 * h + 2]);
                            o[g][4 * h + 3] = fmaf(pu, v.w, o[g][4 * h + 3]);
                        }
                    }
            }
        }
        return true;
    }
    // Four keys at a time, their loads in flight together.
    for (int u0 = 0; u0 < cnt; u0 += 4) {
        float vv[4][HDMAX / 32];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int u = u0 + k;
            if constexpr (sizeof(KV) == 2) {
                // bf16 pages: a committed value by its page, a round row's rounded as the page will hold it.
                const bool paged = u < cnt && t0 + u < clen;
                const KV* pp = paged ? reinterpret_cast<const KV*>(pages[(t0 + u) / PAGE]) +
                                           (size_t)(PAGE + (t0 + u) % PAGE) * row + off
                                     : nullptr;
                const float* vp =
                    u < cnt && !paged ? value_row(t0 + u, clen, pages, vround, m, paths, row, off) : nullptr;
#pragma unroll
                for (int j = 0; j < HDMAX / 32; ++j) {
                    const int d = lane + 32 * j;
                    vv[k][j] = d >= hd ? 0.0f : pp != nullptr ? kv_ld(pp + d) : vp != nullptr ? kv_of<KV>(vp[d]) : 0.0f;
                }
            } else {
                const float* vp = u < cnt ? value_row(t0 + u, clen, pages, vround, m, paths, row, off) : nullptr;
#pragma unroll
                for (int j = 0; j < HDMAX / 32; ++j) {
                    const int d = lane + 32 * j;
                    vv[k][j] = (vp != nullptr && d < hd) ? vp[d] : 0.0f;
                }
            }
        }
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (u0 + k >= cnt) break;
                const float pu = __shfl_sync(FULL_MASK, p[g], (u0 + k) & 31);
#pragma unroll
                for (int j = 0; j < HDMAX / 32; ++j) o[g][j] = fmaf(pu, vv[k][j], o[g][j]);
            }
        }
    }
    return false;
}

// One tile's partials for G query heads of one kv head: keys t0.. (up to 32) of a row against the normed, rotated
// queries q[g]. Each lane loads its key and each value once for the G heads (K and V traffic / G); per head the
// arithmetic is that of G = 1 (the same products and sums in the same order), so the bits do not depend on G.
// Returns per head the tile's max score and exp-sum (same in every lane); o[g][j] holds
// Σ_k exp(s_k − max)·v_k[value_dim(lane, j, wide)], `wide` being what it returns.
template <int G, typename KV>
__device__ __forceinline__ bool attn_tile(const float4* const (&q)[G], int t0, int n, int clen, const u64* pages,
                                          const float* kround, const float* vround, const int* m, const int* paths,
                                          int row, int rr, int off, int hd, float scale, float (&tmax)[G],
                                          float (&tsum)[G], float (&o)[G][HDMAX / 32]) {
    const int t = t0 + (threadIdx.x & 31);
    float s[G], p[G];
    tile_scores<G, KV>(q, t0, n, clen, pages, kround, m, paths, rr, off, hd, scale, s);
#pragma unroll
    for (int g = 0; g < G; ++g) {
        tmax[g] = warp_max(s[g]);
        p[g] = t < n ? expf(s[g] - tmax[g]) : 0.0f;
        tsum[g] = warp_sum(p[g]);
    }
    return tile_values<G, KV>(p, t0, min(32, n - t0), clen, pages, vround, m, paths, row, off, hd, o);
}

// Partials of chunk blockIdx.z of rows row0 + blockIdx.y, query heads blockIdx.x·G … (G heads of one kv head): qr
// [R, heads·hd] the rotated queries (attn_prep), qg [R, heads·2·hd] for the gates. A row with one chunk writes its
// output [R, heads·hd] directly (attn_merge's arithmetic for one chunk); otherwise the chunk's (max, sum, value
// sums) go to part[((i − row0)·heads + h)·nch + c]·(hd + 2). Shared memory: the G rotated queries, each tile's max
// and exp-sum, each tile's value sums; static up to 3 heads (28 KB at 3), dynamic for 6 (54 KB, attention.rs
// chunk_smem).
template <int G, typename KV>
__device__ __forceinline__ void attn_chunk_heads(const float* __restrict__ qr, const float* __restrict__ qg,
                                                 const float* __restrict__ kround, const float* __restrict__ vround,
                                                 float* __restrict__ out, float* __restrict__ part,
                                                 const u64* __restrict__ tables, const int* __restrict__ meta,
                                                 const int* __restrict__ paths, int heads, int kvh, int hd, int row0,
                                                 int nch, int rr) {
    float(*q)[HDMAX];
    float(*tmax)[ATILES];
    float(*tsum)[ATILES];
    float(*tout)[ATILES][HDMAX];
    if constexpr (G <= 3) {
        __shared__ __align__(16) float q_[G][HDMAX];
        __shared__ float tmax_[G][ATILES], tsum_[G][ATILES];
        __shared__ float tout_[G][ATILES][HDMAX];
        q = q_;
        tmax = tmax_;
        tsum = tsum_;
        tout = tout_;
    } else {
        DYNAMIC_SMEM(raw);
        float* f = reinterpret_cast<float*>(raw);
        q = reinterpret_cast<float(*)[HDMAX]>(f);
        tmax = reinterpret_cast<float(*)[ATILES]>(f + G * HDMAX);
        tsum = reinterpret_cast<float(*)[ATILES]>(f + G * HDMAX + G * ATILES);
        tout = reinterpret_cast<float(*)[ATILES][HDMAX]>(f + G * HDMAX + 2 * G * ATILES);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h0 = blockIdx.x * G, i = row0 + blockIdx.y, c = blockIdx.z;
    const int* m = meta + 5 * i;
    const int slot = m[0], clen = m[2], plen = m[4];
    const int n = clen + plen, first = c * ACH;
    if (first >= n) return;
    const int kh = h0 / (heads / kvh), row = kvh * hd, off = kh * hd;
    for (int g = 0; g < G; ++g)
        for (int d = threadIdx.x; d < hd; d += blockDim.x) q[g][d] = qr[((size_t)i * heads + h0 + g) * hd + d];
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)hd);
    const u64* pages = reinterpret_cast<const u64*>(tables[slot]);
    const int tiles = min(ATILES, (n - first + 31) / 32);
    const float4* qp[G];
#pragma unroll
    for (int g = 0; g < G; ++g) qp[g] = reinterpret_cast<const float4*>(q[g]);
    for (int tt = warp; tt < tiles; tt += AWARPS) {
        float o[G][HDMAX / 32], mx[G], sm[G];
        const bool wide = attn_tile<G, KV>(qp, first + 32 * tt, n, clen, pages, kround, vround, m, paths, row, rr, off,
                                           hd, scale, mx, sm, o);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (lane == 0) {
                tmax[g][tt] = mx[g];
                tsum[g][tt] = sm[g];
            }
#pragma unroll
            for (int j = 0; j < HDMAX / 32; ++j) {
                const int d = value_dim(lane, j, wide);
                if (d < hd) tout[g][tt][d] = o[g][j];
            }
        }
    }
    __syncthreads();
    const bool single = n <= ACH;
    for (int g = 0; g < G; ++g) {
        const int h = h0 + g;
        const float* qrow = qg + (size_t)i * heads * 2 * hd + (size_t)h * 2 * hd;
        // The tiles in order against the chunk's max; every thread computes the same weights.
        float cmax = NEG_INF;
        for (int tt = 0; tt < tiles; ++tt) cmax = fmaxf(cmax, tmax[g][tt]);
        float csum = 0.0f;
        for (int tt = 0; tt < tiles; ++tt) csum = fmaf(tsum[g][tt], expf(tmax[g][tt] - cmax), csum);
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float acc = 0.0f;
            for (int tt = 0; tt < tiles; ++tt) acc = fmaf(tout[g][tt][d], expf(tmax[g][tt] - cmax), acc);
            if (single) {
                // attn_merge of one chunk: its weight exp(cmax − cmax) is exactly 1.
                out[(size_t)i * heads * hd + (size_t)h * hd + d] = (acc / csum) * sigmoid_f(qrow[hd + d]);
            } else {
                float* pp = part + (((size_t)(i - row0) * heads + h) * nch + c) * (hd + 2);
                pp[2 + d] = acc;
                if (d == 0) {
                    pp[0] = cmax;
                    pp[1] = csum;
                }
            }
        }
    }
}

// attn_chunk_g{G}: grid (heads / G, rows, chunks); G divides heads / kvh; rr = the round's rows (kround's width).
// Three blocks an SM (at most 80 registers; attn_chunk_g3 spills 64 bytes): left to itself ptxas gave attn_chunk_g3
// 153 registers, one block an SM, and the 27B prefill of 16k tokens took 66% longer in attention (call 32); with
// the committed-tile paths, 3 blocks prefilled 16k tokens 1.5–2% faster than 2 (128 registers), in two runs on the
// 27B MLX4 shape and one on the 27B bf16 (call 67). TF_ATTN_BLOCKS (a -D through TENSORFOLD_CUDA_DEFINES) asks for
// another count, for timing runs. attn_chunk_g6 (six query heads a block: a kv head's keys and values read once for
// six heads, where two g3 blocks read them twice) holds 48 value sums a lane and takes 2 blocks an SM (128
// registers); the default where six divide a kv head's query heads (attention.rs heads_per_block: 5% faster 27B
// decode at 32k of context than g3 on the H200, call 151).
#ifndef TF_ATTN_BLOCKS
#define TF_ATTN_BLOCKS 3
#endif
#define ATTN_CHUNK(G, KV, SUFFIX) ATTN_CHUNK_B(G, KV, SUFFIX, TF_ATTN_BLOCKS)
#define ATTN_CHUNK_B(G, KV, SUFFIX, BLOCKS)                                                                    \
    extern "C" __global__ void __launch_bounds__(AWARPS * 32, BLOCKS) attn_chunk_g##G##SUFFIX(                 \
        const float* qr, const float* qg, const float* kround, const float* vround, float* out, float* part,   \
        const u64* tables, const int* meta, const int* paths, int heads, int kvh, int hd, int row0, int nch,   \
        int rr) {                                                                                              \
        kernel_entry();                                                                                        \
        attn_chunk_heads<G, KV>(qr, qg, kround, vround, out, part, tables, meta, paths, heads, kvh, hd, row0,  \
                                nch, rr);                                                                      \
    }
ATTN_CHUNK(1, float, )
ATTN_CHUNK(2, float, )
ATTN_CHUNK(3, float, )
ATTN_CHUNK(1, u16, _kvbf16)
ATTN_CHUNK(2, u16, _kvbf16)
ATTN_CHUNK(3, u16, _kvbf16)
ATTN_CHUNK_B(6, float, , 2)
ATTN_CHUNK_B(6, u16, _kvbf16, 2)

// Chunks whose weights attn_merge keeps in shared memory at once (a longer row takes several batches, its sums one
// chain across them).
#define MERGE_BATCH 512

// The chunks of rows row0 + blockIdx.y (head blockIdx.x) merged in chunk order against the row's max, times the
// gate; rows of one chunk were written by attn_chunk. Launched with at least hd threads (thread d takes dimension d).
// The row's max is order-free, so the threads take the chunks side by side; each chunk's weight exp(max_c − rmax)
// is made once, by one thread, into shared memory; the sums then run in chunk order, as one thread each had them
// before (each thread then made every weight itself and loaded each chunk's max, sum and value in turn: 128 chunks
// of a 32k context were about 3 × 128 dependent loads a thread).
extern "C" __global__ void attn_merge(const float* __restrict__ qg, const float* __restrict__ part,
                                      float* __restrict__ out, const int* __restrict__ meta, int heads, int hd,
                                      int row0, int nch) {
    kernel_entry();
    __shared__ float wts[MERGE_BATCH], sums[MERGE_BATCH], wmax[32];
    const int h = blockIdx.x, i = row0 + blockIdx.y, d = threadIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    const int* m = meta + 5 * i;
    const int n = m[2] + m[4];
    if (n <= ACH) return;
    const int chunks = (n + ACH - 1) / ACH, stride = hd + 2;
    const float* pp = part + ((size_t)(i - row0) * heads + h) * nch * stride;
    float mx = NEG_INF;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) mx = fmaxf(mx, pp[(size_t)c * stride]);
    mx = warp_max(mx);
    if (lane == 0) wmax[warp] = mx;
    __syncthreads();
    float rmax = NEG_INF;
    for (int w = 0; w < warps; ++w) rmax = fmaxf(rmax, wmax[w]);
    float rsum = 0.0f, acc = 0.0f;
    for (int c0 = 0; c0 < chunks; c0 += MERGE_BATCH) {
        const int nb = min(MERGE_BATCH, chunks - c0);
        __syncthreads();  // the batch before is used up
        for (int u = threadIdx.x; u < nb; u += blockDim.x) {
            const float* cp = pp + (size_t)(c0 + u) * stride;
            wts[u] = expf(cp[0] - rmax);
            sums[u] = cp[1];
        }
        __syncthreads();
        for (int u = 0; u < nb; ++u) rsum = fmaf(sums[u], wts[u], rsum);
        if (d < hd) {
            const float* v = pp + (size_t)c0 * stride + 2 + d;
#pragma unroll 16
            for (int u = 0; u < nb; ++u) acc = fmaf(v[(size_t)u * stride], wts[u], acc);
        }
    }
    if (d < hd) {
        const float* gate = qg + (size_t)i * heads * 2 * hd + (size_t)h * 2 * hd + hd;
        out[(size_t)i * heads * hd + (size_t)h * hd + d] = (acc / rsum) * sigmoid_f(gate[d]);
    }
}

// Appends round rows to pages, one launch for every slot and attention layer of a round: entry e (blockIdx.y) takes
// the offs[4e + 1] rows listed at paths + offs[4e] (keys from its round's krounds[e] [row][rr], values from
// vrounds[e] [rr][row], rr = offs[4e + 3]) at positions offs[4e + 2].. of the pages in its table tables[e]. A
// decode round otherwise paid a launch a slot a layer.
// kv_keep_kvbf16 stores bf16 pages: a key already rounded (attn_prep) is exact; a value is rounded as kv_of does.
template <typename KV>
__device__ __forceinline__ void kv_keep_rows(const u64* __restrict__ krounds, const u64* __restrict__ vrounds,
                                             const u64* __restrict__ tables, const int* __restrict__ paths,
                                             const int* __restrict__ offs, int row) {
    const int* o = offs + 4 * blockIdx.y;
    if ((int)blockIdx.x >= o[1]) return;
    const int t = o[2] + blockIdx.x, src = paths[o[0] + blockIdx.x], rr = o[3];
    const float* kround = reinterpret_cast<const float*>(krounds[blockIdx.y]);
    const float* vround = reinterpret_cast<const float*>(vrounds[blockIdx.y]);
    const u64* table = reinterpret_cast<const u64*>(tables[blockIdx.y]);
    KV* page = reinterpret_cast<KV*>(table[t / PAGE]);
    KV* vd = page + (size_t)(PAGE + t % PAGE) * row;
    for (int c = threadIdx.x; c < row; c += blockDim.x) {
        kv_st(page + key_index(c, t), kround[(size_t)c * rr + src]);
        kv_st(vd + c, vround[(size_t)src * row + c]);
    }
}

extern "C" __global__ void kv_keep(const u64* __restrict__ krounds, const u64* __restrict__ vrounds,
                                   const u64* __restrict__ tables, const int* __restrict__ paths,
                                   const int* __restrict__ offs, int row) {
    kernel_entry();
    kv_keep_rows<float>(krounds, vrounds, tables, paths, offs, row);
}

extern "C" __global__ void kv_keep_kvbf16(const u64* __restrict__ krounds, const u64* __restrict__ vrounds,
                                          const u64* __restrict__ tables, const int* __restrict__ paths,
                                          const int* __restrict__ offs, int row) {
    kernel_entry();
    kv_keep_rows<u16>(krounds, vrounds, tables, paths, offs, row);
}
