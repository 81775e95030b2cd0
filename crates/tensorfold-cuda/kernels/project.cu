// project.cu: y = x Wᵀ for weights in their stored format (dense f32/f16/bf16, MLX affine 2/3/4/5/6/8-bit) and
// embedding lookups. One warp per (output feature, tile of RT rows); lane l always reads the same columns in the
// same order and the lanes meet in one butterfly, so a row's bits never depend on the other rows of the call.

#define PW 4   // warps per block = output features per block
#define RT 8   // rows per tile

template <typename E>
__device__ __forceinline__ void load_vec(const typename E::raw* p, float (&w)[16 / sizeof(typename E::raw)]) {
    if constexpr (sizeof(typename E::raw) == 4) {
        const float4 u = *reinterpret_cast<const float4*>(p);
        w[0] = u.x; w[1] = u.y; w[2] = u.z; w[3] = u.w;
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        const u32 words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            w[2 * k] = E::get((u16)(words[k] & 0xffffu));
            w[2 * k + 1] = E::get((u16)(words[k] >> 16));
        }
    }
}

template <typename E>
__device__ __forceinline__ void project_dense(const float* __restrict__ x, const typename E::raw* __restrict__ w,
                                              float* __restrict__ y, int rows, int out, int cols) {
    constexpr int EPV = 16 / sizeof(typename E::raw);
    const int lane = threadIdx.x & 31;
    const int o = blockIdx.x * PW + (threadIdx.x >> 5);
    if (o >= out) return;
    const int r0 = blockIdx.y * RT;
    const int nr = min(RT, rows - r0);
    const float* xb = x + (size_t)r0 * cols;
    const typename E::raw* wr = w + (size_t)o * cols;
    float acc[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) acc[r] = 0.0f;
    // The vector path needs 16-byte aligned weight and x rows; the choice depends on the shape only.
    const int nvec = (cols % EPV == 0 && cols % 4 == 0) ? cols / EPV : 0;
#pragma unroll 2
    for (int v = lane; v < nvec; v += 32) {
        float wf[EPV];
        load_vec<E>(wr + (size_t)v * EPV, wf);
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            if (r < nr) {
                const float4* xp = reinterpret_cast<const float4*>(xb + (size_t)r * cols + (size_t)v * EPV);
#pragma unroll
                for (int q = 0; q < EPV / 4; ++q) {
                    const float4 xv = xp[q];
                    acc[r] = fmaf(wf[4 * q + 0], xv.x, acc[r]);
                    acc[r] = fmaf(wf[4 * q + 1], xv.y, acc[r]);
                    acc[r] = fmaf(wf[4 * q + 2], xv.z, acc[r]);
                    acc[r] = fmaf(wf[4 * q + 3], xv.w, acc[r]);
                }
            }
        }
    }
    for (int c = nvec * EPV + lane; c < cols; c += 32) {
        const float wv = E::get(wr[c]);
#pragma unroll
        for (int r = 0; r < RT; ++r)
            if (r < nr) acc[r] = fmaf(wv, xb[(size_t)r * cols + c], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < RT; ++r) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < RT; ++r)
            if (r < nr) y[(size_t)(r0 + r) * out + o] = acc[r];
    }
}

// BITS words = 32 codes, whatever the width.
template <int BITS>
__device__ __forceinline__ void load_words(const u32* p, u32 (&wd)[BITS]) {
    if constexpr (BITS == 4) {
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        wd[0] = u.x; wd[1] = u.y; wd[2] = u.z; wd[3] = u.w;
    } else if constexpr (BITS == 8) {
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        const uint4 v = *reinterpret_cast<const uint4*>(p + 4);
        wd[0] = u.x; wd[1] = u.y; wd[2] = u.z; wd[3] = u.w;
        wd[4] = v.x; wd[5] = v.y; wd[6] = v.z; wd[7] = v.w;
    } else if constexpr (BITS == 2) {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        wd[0] = u.x; wd[1] = u.y;
    } else {
#pragma unroll
        for (int i = 0; i < BITS; ++i) wd[i] = p[i];
    }
}

// Code k (LSB-first) of a 32-code chunk; k is a compile-time constant after unrolling.
template <int BITS>
__device__ __forceinline__ float code_at(const u32 (&wd)[BITS], int k) {
    const int bit = k * BITS, i = bit >> 5, s = bit & 31;
    u32 v = wd[i] >> s;
    if (s + BITS > 32) v |= wd[i + 1 < BITS ? i + 1 : BITS - 1] << (32 - s);
    return (float)(v & ((1u << BITS) - 1u));
}

// w = scale·q + bias per element, then one fma per (element, row): cols % 32 == 0 and group % 32 == 0.
template <int BITS, typename S>
__device__ __forceinline__ void project_affine(const float* __restrict__ x, const u32* __restrict__ codes,
                                               const typename S::raw* __restrict__ scales,
                                               const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                               int rows, int out, int cols, int gs) {
    const int lane = threadIdx.x & 31;
    const int o = blockIdx.x * PW + (threadIdx.x >> 5);
    if (o >= out) return;
    const int r0 = blockIdx.y * RT;
    const int nr = min(RT, rows - r0);
    const float* xb = x + (size_t)r0 * cols;
    const int chunks = cols >> 5, ng = cols / gs;
    const u32* wr = codes + (size_t)o * chunks * BITS;
    const typename S::raw* sr = scales + (size_t)o * ng;
    const typename S::raw* br = biases + (size_t)o * ng;
    float acc[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) acc[r] = 0.0f;
#pragma unroll 1
    for (int ch = lane; ch < chunks; ch += 32) {
        u32 wd[BITS];
        load_words<BITS>(wr + (size_t)ch * BITS, wd);
        const int g = (ch << 5) / gs;
        const float s = S::get(sr[g]), b = S::get(br[g]);
#pragma unroll
        for (int kb = 0; kb < 4; ++kb) {
            float wf[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) wf[k] = fmaf(s, code_at<BITS>(wd, kb * 8 + k), b);
#pragma unroll
            for (int r = 0; r < RT; ++r) {
                if (r < nr) {
                    const float4* xp =
                        reinterpret_cast<const float4*>(xb + (size_t)r * cols + ((size_t)ch << 5) + kb * 8);
                    const float4 a = xp[0], c = xp[1];
                    acc[r] = fmaf(wf[0], a.x, acc[r]);
                    acc[r] = fmaf(wf[1], a.y, acc[r]);
                    acc[r] = fmaf(wf[2], a.z, acc[r]);
                    acc[r] = fmaf(wf[3], a.w, acc[r]);
                    acc[r] = fmaf(wf[4], c.x, acc[r]);
                    acc[r] = fmaf(wf[5], c.y, acc[r]);
                    acc[r] = fmaf(wf[6], c.z, acc[r]);
                    acc[r] = fmaf(wf[7], c.w, acc[r]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RT; ++r) acc[r] = warp_sum(acc[r]);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < RT; ++r)
            if (r < nr) y[(size_t)(r0 + r) * out + o] = acc[r];
    }
}

template <typename E>
__device__ __forceinline__ void embed_dense(const typename E::raw* __restrict__ w, const u32* __restrict__ ids,
                                            float* __restrict__ out, int cols) {
    const typename E::raw* row = w + (size_t)ids[blockIdx.x] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = E::get(row[c]);
}

template <int BITS, typename S>
__device__ __forceinline__ void embed_affine(const u32* __restrict__ codes, const typename S::raw* __restrict__ scales,
                                             const typename S::raw* __restrict__ biases, const u32* __restrict__ ids,
                                             float* __restrict__ out, int cols, int gs) {
    const size_t id = ids[blockIdx.x];
    const int ng = cols / gs;
    const u32* row = codes + id * (size_t)(cols / 32 * BITS);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const int bit = c * BITS, i = bit >> 5, s = bit & 31;
        u32 v = row[i] >> s;
        if (s + BITS > 32) v |= row[i + 1] << (32 - s);
        const float q = (float)(v & ((1u << BITS) - 1u));
        const float sc = S::get(scales[id * ng + c / gs]), bi = S::get(biases[id * ng + c / gs]);
        out[(size_t)blockIdx.x * cols + c] = fmaf(sc, q, bi);
    }
}

#define DENSE(NAME, E)                                                                                           \
    extern "C" __global__ void __launch_bounds__(PW * 32)                                                         \
        project_dense_##NAME(const float* x, const E::raw* w, float* y, int rows, int out, int cols) {            \
        project_dense<E>(x, w, y, rows, out, cols);                                                               \
    }                                                                                                             \
    extern "C" __global__ void embed_dense_##NAME(const E::raw* w, const u32* ids, float* out, int cols) {       \
        embed_dense<E>(w, ids, out, cols);                                                                        \
    }
DENSE(f32, F32T)
DENSE(f16, F16T)
DENSE(bf16, BF16T)

#define AFFINE(BITS, NAME, S)                                                                                    \
    extern "C" __global__ void __launch_bounds__(PW * 32)                                                         \
        project_affine_##BITS##_##NAME(const float* x, const u32* codes, const S::raw* scales,                    \
                                       const S::raw* biases, float* y, int rows, int out, int cols, int gs) {     \
        project_affine<BITS, S>(x, codes, scales, biases, y, rows, out, cols, gs);                                \
    }                                                                                                             \
    extern "C" __global__ void embed_affine_##BITS##_##NAME(const u32* codes, const S::raw* scales,               \
                                                            const S::raw* biases, const u32* ids, float* out,     \
                                                            int cols, int gs) {                                   \
        embed_affine<BITS, S>(codes, scales, biases, ids, out, cols, gs);                                         \
    }
#define AFFINE_ALL(BITS) AFFINE(BITS, f32, F32T) AFFINE(BITS, f16, F16T) AFFINE(BITS, bf16, BF16T)
AFFINE_ALL(2)
AFFINE_ALL(3)
AFFINE_ALL(4)
AFFINE_ALL(5)
AFFINE_ALL(6)
AFFINE_ALL(8)
