// project.cu: y = x Wᵀ for weights in their stored format (dense f32/f16/bf16, MLX affine 2/3/4/5/6/8-bit) and
// embedding lookups. One warp per (OPW output features, tile of RT rows), the tiles of one feature group in
// consecutive blocks (1-D grid) so its weights are reused from cache; lane l always reads the same columns in the
// same order and the lanes meet in one butterfly, so a row's bits never depend on the other rows of the call.

#define PW 4   // warps per block
#define RT 8   // rows per tile
#define OPW 4  // output features per warp (they share each x load)

// Reduces each accumulator with the butterfly and writes the tile (lane 0).
__device__ __forceinline__ void store_tile(float (&acc)[RT][OPW], float* __restrict__ y, int r0, int nr, int o0,
                                           int nout, int out) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < OPW; ++j) acc[r][j] = warp_sum(acc[r][j]);
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int j = 0; j < OPW; ++j)
                if (r < nr && j < nout) y[(size_t)(r0 + r) * out + o0 + j] = acc[r][j];
    }
}

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
    const int tiles = (rows + RT - 1) / RT;
    const int o0 = (blockIdx.x / tiles) * (PW * OPW) + (threadIdx.x >> 5) * OPW;
    if (o0 >= out) return;
    const int nout = min(OPW, out - o0);
    const int r0 = (blockIdx.x % tiles) * RT;
    const int nr = min(RT, rows - r0);
    const float* xb = x + (size_t)r0 * cols;
    const typename E::raw* wr = w + (size_t)o0 * cols;
    float acc[RT][OPW];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < OPW; ++j) acc[r][j] = 0.0f;
    // The vector path needs 16-byte aligned weight and x rows; the choice depends on the shape only.
    const int nvec = (cols % EPV == 0 && cols % 4 == 0) ? cols / EPV : 0;
#pragma unroll 2
    for (int v = lane; v < nvec; v += 32) {
        float wf[OPW][EPV];
#pragma unroll
        for (int j = 0; j < OPW; ++j) {
            if (j < nout) {
                load_vec<E>(wr + (size_t)j * cols + (size_t)v * EPV, wf[j]);
            } else {
#pragma unroll
                for (int e = 0; e < EPV; ++e) wf[j][e] = 0.0f;
            }
        }
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            if (r < nr) {
                const float4* xp = reinterpret_cast<const float4*>(xb + (size_t)r * cols + (size_t)v * EPV);
#pragma unroll
                for (int q = 0; q < EPV / 4; ++q) {
                    const float4 xv = xp[q];
#pragma unroll
                    for (int j = 0; j < OPW; ++j) {
                        acc[r][j] = fmaf(wf[j][4 * q + 0], xv.x, acc[r][j]);
                        acc[r][j] = fmaf(wf[j][4 * q + 1], xv.y, acc[r][j]);
                        acc[r][j] = fmaf(wf[j][4 * q + 2], xv.z, acc[r][j]);
                        acc[r][j] = fmaf(wf[j][4 * q + 3], xv.w, acc[r][j]);
                    }
                }
            }
        }
    }
    for (int c = nvec * EPV + lane; c < cols; c += 32) {
#pragma unroll
        for (int j = 0; j < OPW; ++j) {
            const float wv = j < nout ? E::get(wr[(size_t)j * cols + c]) : 0.0f;
#pragma unroll
            for (int r = 0; r < RT; ++r)
                if (r < nr) acc[r][j] = fmaf(wv, xb[(size_t)r * cols + c], acc[r][j]);
        }
    }
    store_tile(acc, y, r0, nr, o0, nout, out);
}

// The 8 codes of columns c0..c0+7 (c0 % 8 == 0) of one packed row: BITS bytes at byte c0/8·BITS.
template <int BITS>
__device__ __forceinline__ unsigned long long load_codes8(const unsigned char* __restrict__ p) {
    if constexpr (BITS == 4) {
        return *reinterpret_cast<const u32*>(p);
    } else if constexpr (BITS == 8) {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        return (unsigned long long)u.x | ((unsigned long long)u.y << 32);
    } else if constexpr (BITS == 2) {
        return *reinterpret_cast<const u16*>(p);
    } else {
        unsigned long long v = 0;
#pragma unroll
        for (int i = 0; i < BITS; ++i) v |= (unsigned long long)p[i] << (8 * i);
        return v;
    }
}

// w = scale·q + bias per element, then one fma per (element, row). Lane l takes columns 8l..8l+7 of every
// 256-column stripe, so a warp reads codes and x contiguously; cols % 32 == 0 and group % 32 == 0.
template <int BITS, typename S>
__device__ __forceinline__ void project_affine(const float* __restrict__ x, const u32* __restrict__ codes,
                                               const typename S::raw* __restrict__ scales,
                                               const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                               int rows, int out, int cols, int gs) {
    const int lane = threadIdx.x & 31;
    const int tiles = (rows + RT - 1) / RT;
    const int o0 = (blockIdx.x / tiles) * (PW * OPW) + (threadIdx.x >> 5) * OPW;
    if (o0 >= out) return;
    const int nout = min(OPW, out - o0);
    const int r0 = (blockIdx.x % tiles) * RT;
    const int nr = min(RT, rows - r0);
    const float* xb = x + (size_t)r0 * cols;
    const int ng = cols / gs;
    const size_t row_bytes = (size_t)cols * BITS / 8;
    const unsigned char* wr = reinterpret_cast<const unsigned char*>(codes) + (size_t)o0 * row_bytes;
    float acc[RT][OPW];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < OPW; ++j) acc[r][j] = 0.0f;
#pragma unroll 2
    for (int c0 = 8 * lane; c0 < cols; c0 += 256) {
        const int g = c0 / gs;
        float wf[OPW][8];
#pragma unroll
        for (int j = 0; j < OPW; ++j) {
            if (j < nout) {
                const unsigned long long q = load_codes8<BITS>(wr + (size_t)j * row_bytes + (size_t)(c0 / 8) * BITS);
                const size_t sg = (size_t)(o0 + j) * ng + g;
                const float s = S::get(scales[sg]), b = S::get(biases[sg]);
#pragma unroll
                for (int k = 0; k < 8; ++k) wf[j][k] = fmaf(s, (float)((q >> (k * BITS)) & ((1u << BITS) - 1u)), b);
            } else {
#pragma unroll
                for (int k = 0; k < 8; ++k) wf[j][k] = 0.0f;
            }
        }
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            if (r < nr) {
                const float4* xp = reinterpret_cast<const float4*>(xb + (size_t)r * cols + c0);
                const float4 a = xp[0], c = xp[1];
#pragma unroll
                for (int j = 0; j < OPW; ++j) {
                    acc[r][j] = fmaf(wf[j][0], a.x, acc[r][j]);
                    acc[r][j] = fmaf(wf[j][1], a.y, acc[r][j]);
                    acc[r][j] = fmaf(wf[j][2], a.z, acc[r][j]);
                    acc[r][j] = fmaf(wf[j][3], a.w, acc[r][j]);
                    acc[r][j] = fmaf(wf[j][4], c.x, acc[r][j]);
                    acc[r][j] = fmaf(wf[j][5], c.y, acc[r][j]);
                    acc[r][j] = fmaf(wf[j][6], c.z, acc[r][j]);
                    acc[r][j] = fmaf(wf[j][7], c.w, acc[r][j]);
                }
            }
        }
    }
    store_tile(acc, y, r0, nr, o0, nout, out);
}

template <typename E>
__device__ __forceinline__ void embed_dense(const typename E::raw* __restrict__ w, const u32* __restrict__ ids,
                                            float* __restrict__ out, int cols) {
    const typename E::raw* row = w + (size_t)ids[blockIdx.x] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = E::get(row[c]);
}

// Rows of an MLX table by id; TILED: 4-bit codes in the tensor-core path's tile-major layout (common.cu).
template <int BITS, typename S, bool TILED>
__device__ __forceinline__ void embed_affine(const u32* __restrict__ codes, const typename S::raw* __restrict__ scales,
                                             const typename S::raw* __restrict__ biases, const u32* __restrict__ ids,
                                             float* __restrict__ out, int cols, int gs) {
    const int id = (int)ids[blockIdx.x];
    const int ng = cols / gs;
    const u32* row = codes + (size_t)id * (size_t)(cols / 32 * BITS);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const int G = c / gs;
        u32 v;
        size_t p;
        if constexpr (TILED) {
            const int cc = c % gs;
            v = codes[a4_tile_code(id, G, ng, gs / 2) / 4 + cc / 8] >> (4 * (cc & 7));
            p = a4_tile_param(id, G, ng);
        } else {
            const int bit = c * BITS, i = bit >> 5, s = bit & 31;
            v = row[i] >> s;
            if (s + BITS > 32) v |= row[i + 1] << (32 - s);
            p = (size_t)id * ng + G;
        }
        const float q = (float)(v & ((1u << BITS) - 1u));
        const float sc = S::get(scales[p]), bi = S::get(biases[p]);
        out[(size_t)blockIdx.x * cols + c] = fmaf(sc, q, bi);
    }
}

#define DENSE(NAME, E)                                                                                           \
    extern "C" __global__ void __launch_bounds__(PW * 32)                                                         \
        project_dense_##NAME(const float* x, const E::raw* w, float* y, int rows, int out, int cols) {            \
        kernel_entry();                                                                                           \
        project_dense<E>(x, w, y, rows, out, cols);                                                               \
    }                                                                                                             \
    extern "C" __global__ void embed_dense_##NAME(const E::raw* w, const u32* ids, float* out, int cols) {       \
        kernel_entry();                                                                                          \
        embed_dense<E>(w, ids, out, cols);                                                                        \
    }
DENSE(f32, F32T)
DENSE(f16, F16T)
DENSE(bf16, BF16T)

#define AFFINE(BITS, NAME, S)                                                                                    \
    extern "C" __global__ void __launch_bounds__(PW * 32)                                                         \
        project_affine_##BITS##_##NAME(const float* x, const u32* codes, const S::raw* scales,                    \
                                       const S::raw* biases, float* y, int rows, int out, int cols, int gs) {     \
        kernel_entry();                                                                                           \
        project_affine<BITS, S>(x, codes, scales, biases, y, rows, out, cols, gs);                                \
    }                                                                                                             \
    extern "C" __global__ void embed_affine_##BITS##_##NAME(const u32* codes, const S::raw* scales,               \
                                                            const S::raw* biases, const u32* ids, float* out,     \
                                                            int cols, int gs) {                                   \
        kernel_entry();                                                                                           \
        embed_affine<BITS, S, false>(codes, scales, biases, ids, out, cols, gs);                                  \
    }
#define AFFINE_ALL(BITS) AFFINE(BITS, f32, F32T) AFFINE(BITS, f16, F16T) AFFINE(BITS, bf16, BF16T)
#define EMBED_TILED(NAME, S)                                                                                     \
    extern "C" __global__ void embed_affine_4_tiled_##NAME(const u32* codes, const S::raw* scales,               \
                                                           const S::raw* biases, const u32* ids, float* out,      \
                                                           int cols, int gs) {                                    \
        kernel_entry();                                                                                           \
        embed_affine<4, S, true>(codes, scales, biases, ids, out, cols, gs);                                      \
    }
EMBED_TILED(f32, F32T)
EMBED_TILED(f16, F16T)
EMBED_TILED(bf16, BF16T)
AFFINE_ALL(2)
AFFINE_ALL(3)
AFFINE_ALL(4)
AFFINE_ALL(5)
AFFINE_ALL(6)
AFFINE_ALL(8)
