// deltanet.cu: Gated DeltaNet over a round. dn_conv: causal depthwise conv over (committed tail + the row's
// ancestors + the row) and SiLU. dn_recur: per (slot, value head) block, the fp32 delta rule stepped row by row
// from each row's parent state (restored from a snapshot or the round's start when the row branches), with the
// q/k L2 norms, gates and gated RMSNorm fused; the state lives in registers, one warp per value-dim row.
// A row's arithmetic is the same whether it is stepped in place, after a restore, or in a replay.

#define DN_WARPS 8
#define KMAX 4    // key_dim <= 128 (4 per lane)
#define VMAX 16   // value_dim <= 128 (16 rows per warp)

extern "C" __global__ void dn_conv(const float* __restrict__ mixed, const float* __restrict__ conv_w,
                                   float* __restrict__ x, const u64* __restrict__ tails, const int* __restrict__ meta,
                                   const int* __restrict__ paths, int C, int K) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (c >= C) return;
    const int* m = meta + 5 * i;
    const int slot = m[0], plen = m[4];
    const float* tail = reinterpret_cast<const float*>(tails[slot]);
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) {
        const int back = K - 1 - j;  // 0 = the row itself
        const float v = back < plen ? mixed[(size_t)path_at(m, paths, plen - 1 - back) * C + c]
                                    : tail[(size_t)(K - 2 - (back - plen)) * C + c];
        acc = fmaf(v, conv_w[(size_t)c * K + j], acc);
    }
    x[(size_t)i * C + c] = silu_f(acc);
}

__device__ __forceinline__ void dn_load(float (&S)[VMAX][KMAX], const float* __restrict__ src, int Dk, int Dv) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < VMAX; ++m) {
        const int j = warp + DN_WARPS * m;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = lane + 32 * kk;
            S[m][kk] = (j < Dv && d < Dk) ? src[(size_t)j * Dk + d] : 0.0f;
        }
    }
}

__device__ __forceinline__ void dn_store(const float (&S)[VMAX][KMAX], float* __restrict__ dst, int Dk, int Dv) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < VMAX; ++m) {
        const int j = warp + DN_WARPS * m;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = lane + 32 * kk;
            if (j < Dv && d < Dk) dst[(size_t)j * Dk + d] = S[m][kk];
        }
    }
}

// Entries `list[3e..]` = (round row, restore, save) for e in slot_off[s]..slot_off[s+1]: restore −1 = go on
// from the current state, −2 = the round's start state, k ≥ 0 = snapshot k; save k ≥ 0 = store the state after
// the row as snapshot k. x: dn_conv output [R, 2·Hk·Dk + Hv·Dv]; bg, ag: [R, Hv]; z, out: [R, Hv·Dv].
extern "C" __global__ void __launch_bounds__(DN_WARPS * 32)
    dn_recur(const float* __restrict__ x, const float* __restrict__ bg, const float* __restrict__ ag,
             const float* __restrict__ z, float* __restrict__ out, const float* __restrict__ a_log,
             const float* __restrict__ dt_bias, const float* __restrict__ norm_w, const u64* __restrict__ states,
             const u64* __restrict__ starts, float* __restrict__ snaps, const int* __restrict__ list,
             const int* __restrict__ slot_off, int Hk, int Hv, int Dk, int Dv, float eps, int write_out) {
    __shared__ float os[DN_WARPS * VMAX];
    __shared__ float scratch[32];
    const int h = blockIdx.x, s = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kh = h / (Hv / Hk), KT = Hk * Dk, C = 2 * KT + Hv * Dv;
    const size_t hs = (size_t)Dv * Dk;
    float* st = reinterpret_cast<float*>(states[s]) + h * hs;
    float S[VMAX][KMAX];
    dn_load(S, st, Dk, Dv);
    const float q_scale = 1.0f / sqrtf((float)Dk);
    const float neg_a = -expf(a_log[h]);
    for (int e = slot_off[s]; e < slot_off[s + 1]; ++e) {
        const int i = list[3 * e], restore = list[3 * e + 1], save = list[3 * e + 2];
        if (restore == -2) dn_load(S, reinterpret_cast<const float*>(starts[s]) + h * hs, Dk, Dv);
        else if (restore >= 0) dn_load(S, snaps + ((size_t)restore * Hv + h) * hs, Dk, Dv);
        const float* xr = x + (size_t)i * C;
        float qv[KMAX], kv[KMAX];
        float qss = 0.0f, kss = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = lane + 32 * kk;
            qv[kk] = d < Dk ? xr[kh * Dk + d] : 0.0f;
            kv[kk] = d < Dk ? xr[KT + kh * Dk + d] : 0.0f;
            qss = fmaf(qv[kk], qv[kk], qss);
            kss = fmaf(kv[kk], kv[kk], kss);
        }
        const float qinv = 1.0f / sqrtf(warp_sum(qss) + 1e-6f);
        const float kinv = 1.0f / sqrtf(warp_sum(kss) + 1e-6f);
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            qv[kk] = (qv[kk] * qinv) * q_scale;
            kv[kk] = kv[kk] * kinv;
        }
        const float beta = sigmoid_f(bg[(size_t)i * Hv + h]);
        const float decay = expf(neg_a * softplus_f(ag[(size_t)i * Hv + h] + dt_bias[h]));
        const float* vr = xr + 2 * KT + h * Dv;
#pragma unroll
        for (int m = 0; m < VMAX; ++m) {
            const int j = warp + DN_WARPS * m;
            if (j < Dv) {
                float p = 0.0f;
#pragma unroll
                for (int kk = 0; kk < KMAX; ++kk) {
                    S[m][kk] *= decay;
                    p = fmaf(S[m][kk], kv[kk], p);
                }
                const float delta = beta * (vr[j] - warp_sum(p));
                float o = 0.0f;
#pragma unroll
                for (int kk = 0; kk < KMAX; ++kk) {
                    S[m][kk] = fmaf(delta, kv[kk], S[m][kk]);
                    o = fmaf(S[m][kk], qv[kk], o);
                }
                o = warp_sum(o);
                if (lane == 0) os[j] = o;
            }
        }
        if (save >= 0) dn_store(S, snaps + ((size_t)save * Hv + h) * hs, Dk, Dv);
        if (write_out) {
            __syncthreads();
            float ss = 0.0f;
            for (int j = threadIdx.x; j < Dv; j += blockDim.x) ss = fmaf(os[j], os[j], ss);
            ss = block_sum(ss, scratch);
            const float inv = 1.0f / sqrtf(ss / (float)Dv + eps);
            const size_t ob = (size_t)i * Hv * Dv + (size_t)h * Dv;
            for (int j = threadIdx.x; j < Dv; j += blockDim.x)
                out[ob + j] = norm_w[j] * (os[j] * inv) * silu_f(z[ob + j]);
            __syncthreads();
        }
    }
    dn_store(S, st, Dk, Dv);
}

// The conv tail after keeping `path`: the last K−1 rows of (old tail ++ path's pre-conv inputs).
extern "C" __global__ void dn_tail_keep(const float* __restrict__ old_tail, const float* __restrict__ mixed,
                                        float* __restrict__ new_tail, const int* __restrict__ path, int plen, int C,
                                        int K) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= C) return;
    const int idx = plen + t;
    new_tail[(size_t)t * C + c] =
        idx < K - 1 ? old_tail[(size_t)idx * C + c] : mixed[(size_t)path[idx - (K - 1)] * C + c];
}
