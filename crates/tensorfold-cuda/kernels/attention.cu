// attention.cu: gated full attention over a round. Keys of a row: the slot's committed rows (16-row pages) then the
// row's ancestors in the round, visited in position order in tiles of 32 aligned to position 0 with an online
// softmax merged tile by tile, so a row's bits depend only on its own keys, never on the rest of the round.
// Row metadata: `path_at` in common.cu.

#define AW 1        // warps per block, one (row, head) each (spread over SMs)
#define HDMAX 256   // largest head_dim
#define PAGE 16     // positions per KV page: [K rows | V rows], each [PAGE, kv_heads·head_dim]

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

// Normed, rotated keys of the round: k [R, kvh·hd] → kout.
extern "C" __global__ void __launch_bounds__(AW * 32)
    attn_prep_k(const float* __restrict__ k, float* __restrict__ kout, const float* __restrict__ kn,
                const int* __restrict__ meta, int kvh, int hd, int rd, double theta, float eps) {
    __shared__ __align__(16) float ks[AW][HDMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = blockIdx.x * AW + warp, i = blockIdx.y;
    if (h >= kvh) return;
    const float* src = k + ((size_t)i * kvh + h) * hd;
    float* v = ks[warp];
    for (int d = lane; d < hd; d += 32) v[d] = src[d];
    __syncwarp();
    norm_rope_warp(v, kn, hd, rd, meta[5 * i + 1], theta, eps);
    float* dst = kout + ((size_t)i * kvh + h) * hd;
    for (int d = lane; d < hd; d += 32) dst[d] = v[d];
}

__device__ __forceinline__ const float* key_row(int t, int clen, const u64* pages, const float* kround,
                                                const int* m, const int* paths, int row, int off) {
    if (t < clen) return reinterpret_cast<const float*>(pages[t / PAGE]) + (size_t)(t % PAGE) * row + off;
    return kround + (size_t)path_at(m, paths, t - clen) * row + off;
}

__device__ __forceinline__ const float* value_row(int t, int clen, const u64* pages, const float* vround,
                                                  const int* m, const int* paths, int row, int off) {
    if (t < clen) return reinterpret_cast<const float*>(pages[t / PAGE]) + (size_t)(PAGE + t % PAGE) * row + off;
    return vround + (size_t)path_at(m, paths, t - clen) * row + off;
}

// qg [R, heads·2·hd] (per head: query | gate) → out [R, heads·hd]. `tables[slot]` is the slot's page-pointer array.
extern "C" __global__ void __launch_bounds__(AW * 32)
    attn_rows(const float* __restrict__ qg, const float* __restrict__ kround, const float* __restrict__ vround,
              float* __restrict__ out, const float* __restrict__ qn, const u64* __restrict__ tables,
              const int* __restrict__ meta, const int* __restrict__ paths, int heads, int kvh, int hd, int rd,
              double theta, float eps) {
    __shared__ __align__(16) float qs[AW][HDMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = blockIdx.x * AW + warp, i = blockIdx.y;
    if (h >= heads) return;
    const int* m = meta + 5 * i;
    const int slot = m[0], pos = m[1], clen = m[2], plen = m[4];
    const int kh = h / (heads / kvh), row = kvh * hd, off = kh * hd;
    const float* qrow = qg + (size_t)i * heads * 2 * hd + (size_t)h * 2 * hd;
    float* q = qs[warp];
    for (int d = lane; d < hd; d += 32) q[d] = qrow[d];
    __syncwarp();
    norm_rope_warp(q, qn, hd, rd, pos, theta, eps);
    const float scale = 1.0f / sqrtf((float)hd);
    const u64* pages = reinterpret_cast<const u64*>(tables[slot]);
    const int n = clen + plen;
    float run_max = NEG_INF, run_sum = 0.0f;
    float o[HDMAX / 32];
#pragma unroll
    for (int j = 0; j < HDMAX / 32; ++j) o[j] = 0.0f;
    for (int t0 = 0; t0 < n; t0 += 32) {
        const int t = t0 + lane;
        float s = NEG_INF;
        if (t < n) {
            const float4* kp = reinterpret_cast<const float4*>(key_row(t, clen, pages, kround, m, paths, row, off));
            const float4* qp = reinterpret_cast<const float4*>(q);
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll 8
            for (int d = 0; d < hd / 4; ++d) {
                const float4 kv = kp[d], qv = qp[d];
                a0 = fmaf(qv.x, kv.x, a0);
                a1 = fmaf(qv.y, kv.y, a1);
                a2 = fmaf(qv.z, kv.z, a2);
                a3 = fmaf(qv.w, kv.w, a3);
            }
            s = ((a0 + a1) + (a2 + a3)) * scale;
        }
        const float new_max = fmaxf(run_max, warp_max(s));
        const float alpha = expf(run_max - new_max);
        const float p = t < n ? expf(s - new_max) : 0.0f;
        run_sum = run_sum * alpha + warp_sum(p);
#pragma unroll
        for (int j = 0; j < HDMAX / 32; ++j) o[j] *= alpha;
        const int cnt = min(32, n - t0);
        // Values four keys at a time: their loads are in flight together (a decode row is a chain of such
        // trips), and they are added in key order as before.
        for (int u0 = 0; u0 < cnt; u0 += 4) {
            float vv[4][HDMAX / 32], pu[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int u = u0 + k;
                pu[k] = __shfl_sync(FULL_MASK, p, u & 31);
                const float* vp = u < cnt ? value_row(t0 + u, clen, pages, vround, m, paths, row, off) : nullptr;
#pragma unroll
                for (int j = 0; j < HDMAX / 32; ++j) {
                    const int d = lane + 32 * j;
                    vv[k][j] = (vp != nullptr && d < hd) ? vp[d] : 0.0f;
                }
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (u0 + k >= cnt) break;
#pragma unroll
                for (int j = 0; j < HDMAX / 32; ++j) {
                    const int d = lane + 32 * j;
                    if (d < hd) o[j] = fmaf(pu[k], vv[k][j], o[j]);
                }
            }
        }
        run_max = new_max;
    }
    const float* gate = qrow + hd;
    float* orow = out + (size_t)i * heads * hd + (size_t)h * hd;
#pragma unroll
    for (int j = 0; j < HDMAX / 32; ++j) {
        const int d = lane + 32 * j;
        if (d < hd) orow[d] = (o[j] / run_sum) * sigmoid_f(gate[d]);
    }
}

// Appends round rows `path` (keys from kround, values from vround) at positions start.. of a slot's pages.
extern "C" __global__ void kv_keep(const float* __restrict__ kround, const float* __restrict__ vround,
                                   const u64* __restrict__ table, const int* __restrict__ path, int start, int row) {
    const int t = start + blockIdx.x;
    float* page = reinterpret_cast<float*>(table[t / PAGE]);
    const size_t src = (size_t)path[blockIdx.x] * row;
    float* kd = page + (size_t)(t % PAGE) * row;
    float* vd = page + (size_t)(PAGE + t % PAGE) * row;
    for (int c = threadIdx.x; c < row; c += blockDim.x) {
        kd[c] = kround[src + c];
        vd[c] = vround[src + c];
    }
}
