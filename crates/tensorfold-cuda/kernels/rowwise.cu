// rowwise.cu: RMSNorm (one block per row, one fixed reduction tree), residual add, SwiGLU, row gathers and copies (the
// norms and SwiGLU may also write the tensor-core form of their output); each output depends on its own row only.

#define RN_REG 8  // columns per thread a norm holds in registers (rows of up to 8·blockDim columns)

// One block's row of x (plus y, written back into x, when y is given) → out = RMSNorm·w, and out's tensor-core
// form (project_mma.cu's prepare_store) when prep != 0 (cols % 32 == 0: each warp's lanes then take 32
// consecutive columns on every pass). Each thread sums the squares of columns tid, tid + blockDim, … in that
// order and block_sum adds the threads' partials, whichever branch runs, so the fused add and the plain norm give
// the same bits. Rows that fit are loaded once, with w, before the reduction (one memory trip, not three).
__device__ __forceinline__ void rms_row(float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ w, float* __restrict__ out, u16* __restrict__ oh,
                                        u16* __restrict__ ol, float* __restrict__ os, u16* __restrict__ obt,
                                        int cols, float eps, int prep) {
    __shared__ float scratch[32];
    const size_t row0 = (size_t)blockIdx.x * cols;
    float* xr = x + row0;
    const int tid = threadIdx.x, nt = blockDim.x;
    float ss = 0.0f;
    if (cols <= RN_REG * nt) {
        float v[RN_REG], wv[RN_REG];
#pragma unroll
        for (int k = 0; k < RN_REG; ++k) {
            const int c = tid + k * nt;
            v[k] = wv[k] = 0.0f;
            if (c < cols) {
                v[k] = y != nullptr ? xr[c] + y[row0 + c] : xr[c];
                wv[k] = w[c];
            }
        }
#pragma unroll
        for (int k = 0; k < RN_REG; ++k) {
            const int c = tid + k * nt;
            if (c < cols) {
                if (y != nullptr) xr[c] = v[k];
                ss = fmaf(v[k], v[k], ss);
            }
        }
        ss = block_sum(ss, scratch);
        const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
#pragma unroll
        for (int k = 0; k < RN_REG; ++k) {
            const int c = tid + k * nt;
            if (c < cols) {
                const float o = (v[k] * inv) * wv[k];
                out[row0 + c] = o;
                if (prep) prepare_store(row0 + c, o, oh, ol, os, obt, cols);
            }
        }
        return;
    }
    for (int c = tid; c < cols; c += nt) {
        const float v = y != nullptr ? xr[c] + y[row0 + c] : xr[c];
        if (y != nullptr) xr[c] = v;
        ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int c = tid; c < cols; c += nt) {
        const float o = (xr[c] * inv) * w[c];
        out[row0 + c] = o;
        if (prep) prepare_store(row0 + c, o, oh, ol, os, obt, cols);
    }
}

// y = RMSNorm(x)·w per row (one block each), and y's tensor-core form when prep != 0 (no prepare_x launch).
extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                    u16* __restrict__ yh, u16* __restrict__ yl, float* __restrict__ ys,
                                    u16* __restrict__ ybt, int cols, float eps, int prep) {
    kernel_entry();
    // x is only read when no residual is given.
    rms_row(const_cast<float*>(x), nullptr, w, y, yh, yl, ys, ybt, cols, eps, prep);
}

// x += y, then rms_norm of the new x into out (its tensor-core form too when prep != 0): the bits of add_assign
// then rms_norm launched with the same threads.
extern "C" __global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ w, float* __restrict__ out, u16* __restrict__ oh,
                                        u16* __restrict__ ol, float* __restrict__ os, u16* __restrict__ obt, int cols,
                                        float eps, int prep) {
    kernel_entry();
    rms_row(x, y, w, out, oh, ol, os, obt, cols, eps, prep);
}

extern "C" __global__ void add_assign(float* __restrict__ x, const float* __restrict__ y, u64 n) {
    kernel_entry();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) x[i] += y[i];
}

// dst[i] = src[i] for n 32-bit words: a device copy that can sit among a recorded round's launches (graph.rs).
extern "C" __global__ void copy_words(const u32* __restrict__ src, u32* __restrict__ dst, u64 n) {
    kernel_entry();
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) dst[i] = src[i];
}

// The first `pages` pages of a KV state (device page table `table`, `page_words` 32-bit words a page) copied into
// one contiguous buffer, page p at p·page_words, or back from it when `restore` != 0: a prompt-cache snapshot or
// its restore in one launch a layer, where a copy a page cost the host a driver call each (BENCHMARKS.md §7).
extern "C" __global__ void copy_pages(const u64* __restrict__ table, u32* __restrict__ flat, u64 page_words,
                                      int pages, int restore) {
    kernel_entry();
    for (int p = blockIdx.y; p < pages; p += gridDim.y) {
        u32* page = reinterpret_cast<u32*>(table[p]);
        u32* buf = flat + (u64)p * page_words;
        for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < page_words; i += (u64)gridDim.x * blockDim.x) {
            if (restore) page[i] = buf[i];
            else buf[i] = page[i];
        }
    }
}

// silu(g)·u, one thread per element, and the output's tensor-core form when prep != 0 (cols % 32 == 0).
extern "C" __global__ void swiglu(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ out,
                                  u16* __restrict__ oh, u16* __restrict__ ol, float* __restrict__ os,
                                  u16* __restrict__ obt, u64 n, int cols, int prep) {
    kernel_entry();
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = silu_f(g[i]) * u[i];
    out[i] = v;
    if (prep) prepare_store(i, v, oh, ol, os, obt, cols);
}

extern "C" __global__ void gather_rows(const float* __restrict__ x, const int* __restrict__ rows,
                                       float* __restrict__ out, int cols) {
    kernel_entry();
    const float* src = x + (size_t)rows[blockIdx.x] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = src[c];
}
