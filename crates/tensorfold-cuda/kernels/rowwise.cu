// rowwise.cu: RMSNorm (a row on one block or one cluster of blocks, one fixed reduction tree), residual add, SwiGLU,
// row gathers and copies (the norms and SwiGLU may also write the tensor-core form of their output); each output
// depends on its own row only.

#define RN_REG 8  // columns per thread a norm holds in registers (rows of up to 8·(threads a row) columns)

// Thread-block clusters, for the norms whose row spans the blocks of one cluster. In the CPU emulator a cluster's
// blocks run together as fibers, with one copy of their static shared memory: a store to rank r's copy lands in
// that one copy, which is what every rank's copy would hold after row_sum's push.
#ifdef TF_EMU
__device__ __forceinline__ int cluster_rank() { return emu_cluster_rank(); }
__device__ __forceinline__ void cluster_arrive_relaxed() {}
__device__ __forceinline__ void cluster_arrive() {}
__device__ __forceinline__ void cluster_wait() { emu_cluster_sync(); }
__device__ __forceinline__ void cluster_store(float* local, int, float v) { *local = v; }
#else
__device__ __forceinline__ int cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return (int)r;
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
// v into the copy of `local` (a shared address of this block) in the shared memory of cluster block `rank`.
__device__ __forceinline__ void cluster_store(float* local, int rank, float v) {
    const u32 a = smem_addr(reinterpret_cast<unsigned char*>(local));
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(r), "f"(v) : "memory");
}
#endif

// block_sum over the CL·blockDim threads of a row's cluster, the cluster's blocks in rank order (CL = 1: one block,
// block_sum itself): warp butterflies, then the row's warp totals added in order, warp w of rank r being the
// row's warp r·(blockDim / 32) + w. That is block_sum's tree for a block of the row's threads, so the bits are
// the same whether a row is one block or a cluster. The caller arrived (cluster_arrive_relaxed) at its start;
// the wait here makes sure every block of the cluster has started before its shared memory is written.
template <int CL>
__device__ __forceinline__ float row_sum(float v, float* scratch) {
    if constexpr (CL == 1) {
        return block_sum(v, scratch);
    } else {
        const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        v = warp_sum(v);
        cluster_wait();
        if (lane < CL) cluster_store(scratch + cluster_rank() * nw + (threadIdx.x >> 5), lane, v);
        cluster_arrive();
        cluster_wait();
        return sum_in_order(scratch, CL * nw);
    }
}

// One row of x (plus y, written back into x, when y is given) → out = RMSNorm·w, and out's tensor-core form
// (project_mma.cu's prepare_store) when prep != 0 (cols % 32 == 0: each warp's lanes then take 32 consecutive
// columns on every pass). The row is block blockIdx.x / CL's, its threads the CL blocks of a cluster (CL = 1: one
// block a row): thread t = rank·blockDim + tid of nt = CL·blockDim sums the squares of columns t, t + nt, … in
// that order and row_sum adds the threads' partials, whichever branch runs and whatever CL, so the fused add and
// the plain norm, and a row on one block or on a cluster, give the same bits. Rows that fit are loaded once, with
// w, before the reduction (one memory trip, not three).
template <int CL>
__device__ __forceinline__ void rms_row(float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ w, float* __restrict__ out, u16* __restrict__ oh,
                                        u16* __restrict__ ol, float* __restrict__ os, u16* __restrict__ obt,
                                        int cols, float eps, int prep) {
    __shared__ float scratch[32];
    const int row = blockIdx.x / CL;
    const size_t row0 = (size_t)row * cols;
    float* xr = x + row0;
    const int tid = (CL == 1 ? 0 : cluster_rank() * (int)blockDim.x) + threadIdx.x, nt = CL * blockDim.x;
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
        for (int k = 0; k < RN_REG; ++k)
            if (tid + k * nt < cols) ss = fmaf(v[k], v[k], ss);
        ss = row_sum<CL>(ss, scratch);
        const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
#pragma unroll
        for (int k = 0; k < RN_REG; ++k) {
            const int c = tid + k * nt;
            if (c < cols) {
                // The residual is stored after the sum: a cluster's barrier (its release) would otherwise wait
                // for these stores to complete.
                if (y != nullptr) xr[c] = v[k];
                const float o = (v[k] * inv) * wv[k];
                out[row0 + c] = o;
                if (prep) prepare_store_at(row0 + c, row, c, o, oh, ol, os, obt, cols);
            }
        }
        return;
    }
    for (int c = tid; c < cols; c += nt) {
        const float v = y != nullptr ? xr[c] + y[row0 + c] : xr[c];
        if (y != nullptr) xr[c] = v;
        ss = fmaf(v, v, ss);
    }
    ss = row_sum<CL>(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int c = tid; c < cols; c += nt) {
        const float o = (xr[c] * inv) * w[c];
        out[row0 + c] = o;
        if (prep) prepare_store_at(row0 + c, row, c, o, oh, ol, os, obt, cols);
    }
}

// y = RMSNorm(x)·w per row (one block each), and y's tensor-core form when prep != 0 (no prepare_x launch). Rows of
// 4,096 columns or more take 1,024 threads (ops.rs), so 64 registers at most (left alone, ptxas took 70).
extern "C" __global__ void __launch_bounds__(1024)
    rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, u16* __restrict__ yh,
             u16* __restrict__ yl, float* __restrict__ ys, u16* __restrict__ ybt, int cols, float eps, int prep) {
    kernel_entry();
    // x is only read when no residual is given.
    rms_row<1>(const_cast<float*>(x), nullptr, w, y, yh, yl, ys, ybt, cols, eps, prep);
}

// x += y, then rms_norm of the new x into out (its tensor-core form too when prep != 0): the bits of add_assign
// then rms_norm launched with the same threads.
extern "C" __global__ void __launch_bounds__(1024)
    add_rms_norm(float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ w,
                 float* __restrict__ out, u16* __restrict__ oh, u16* __restrict__ ol, float* __restrict__ os,
                 u16* __restrict__ obt, int cols, float eps, int prep) {
    kernel_entry();
    rms_row<1>(x, y, w, out, oh, ol, os, obt, cols, eps, prep);
}

// rms_norm and add_rms_norm with a row on a cluster of CL blocks (blockDim = the one-block kernels' 1,024 threads / CL):
// the same bits (rms_row). A one-block row of 1,024 threads is issue-bound on its one SM (call 147: 8 µs, 127
// launches a 27B round); the cluster spreads the row's work over CL SMs.
#define NORM_CLUSTER_KERNELS(CL)                                                                                      \
    extern "C" __global__ void __launch_bounds__(1024 / CL) __cluster_dims__(CL, 1, 1)                               \
        rms_norm_c##CL(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,              \
                       u16* __restrict__ yh, u16* __restrict__ yl, float* __restrict__ ys, u16* __restrict__ ybt,    \
                       int cols, float eps, int prep) {                                                              \
        kernel_entry();                                                                                              \
        cluster_arrive_relaxed();                                                                                    \
        rms_row<CL>(const_cast<float*>(x), nullptr, w, y, yh, yl, ys, ybt, cols, eps, prep);                        \
    }                                                                                                                \
    extern "C" __global__ void __launch_bounds__(1024 / CL) __cluster_dims__(CL, 1, 1)                               \
        add_rms_norm_c##CL(float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ w,          \
                           float* __restrict__ out, u16* __restrict__ oh, u16* __restrict__ ol,                      \
                           float* __restrict__ os, u16* __restrict__ obt, int cols, float eps, int prep) {           \
        kernel_entry();                                                                                              \
        cluster_arrive_relaxed();                                                                                    \
        rms_row<CL>(x, y, w, out, oh, ol, os, obt, cols, eps, prep);                                                 \
    }

NORM_CLUSTER_KERNELS(4)
NORM_CLUSTER_KERNELS(8)

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

// silu(g)·u, one thread per element (columns along x, rows along y), and the output's tensor-core form when
// prep != 0 (cols % 32 == 0: a warp is wholly in range or wholly out).
extern "C" __global__ void swiglu(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ out,
                                  u16* __restrict__ oh, u16* __restrict__ ol, float* __restrict__ os,
                                  u16* __restrict__ obt, int rows, int cols, int prep) {
    kernel_entry();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {
        const size_t i = (size_t)row * cols + c;
        const float v = silu_f(g[i]) * u[i];
        out[i] = v;
        if (prep) prepare_store_at(i, row, c, v, oh, ol, os, obt, cols);
    }
}

extern "C" __global__ void gather_rows(const float* __restrict__ x, const int* __restrict__ rows,
                                       float* __restrict__ out, int cols) {
    kernel_entry();
    const float* src = x + (size_t)rows[blockIdx.x] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = src[c];
}
