// rowwise.cu: RMSNorm (one block per row, one fixed reduction tree), residual add, SwiGLU and row gathers (the
// norms and SwiGLU may also write the tensor-core form of their output); each output depends on its own row only.

// y = RMSNorm(x)·w, and y's tensor-core form (project_mma.cu's prepare_store) when prep != 0, which saves the
// prepare_x launch; prep needs cols % 32 == 0 (each warp's lanes then take 32 consecutive columns on every pass).
extern "C" __global__ void rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                                    u16* __restrict__ yh, u16* __restrict__ yl, float* __restrict__ ys, int cols,
                                    float eps, int prep) {
    __shared__ float scratch[32];
    const size_t row0 = (size_t)blockIdx.x * cols;
    const float* xr = x + row0;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) ss = fmaf(xr[c], xr[c], ss);
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = (xr[c] * inv) * w[c];
        y[row0 + c] = v;
        if (prep) prepare_store(row0 + c, v, yh, yl, ys);
    }
}

// x += y, then rms_norm of the new x into out (its tensor-core form too when prep != 0): the bits of add_assign
// then rms_norm launched with the same threads (each thread adds the columns it then squares and scales).
extern "C" __global__ void add_rms_norm(float* __restrict__ x, const float* __restrict__ y,
                                        const float* __restrict__ w, float* __restrict__ out, u16* __restrict__ oh,
                                        u16* __restrict__ ol, float* __restrict__ os, int cols, float eps, int prep) {
    __shared__ float scratch[32];
    const size_t row0 = (size_t)blockIdx.x * cols;
    float* xr = x + row0;
    const float* yr = y + row0;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = xr[c] + yr[c];
        xr[c] = v;
        ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = (xr[c] * inv) * w[c];
        out[row0 + c] = v;
        if (prep) prepare_store(row0 + c, v, oh, ol, os);
    }
}

extern "C" __global__ void add_assign(float* __restrict__ x, const float* __restrict__ y, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) x[i] += y[i];
}

// silu(g)·u, one thread per element, and the output's tensor-core form when prep != 0 (n % 32 == 0).
extern "C" __global__ void swiglu(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ out,
                                  u16* __restrict__ oh, u16* __restrict__ ol, float* __restrict__ os, u64 n,
                                  int prep) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = silu_f(g[i]) * u[i];
    out[i] = v;
    if (prep) prepare_store(i, v, oh, ol, os);
}

extern "C" __global__ void gather_rows(const float* __restrict__ x, const int* __restrict__ rows,
                                       float* __restrict__ out, int cols) {
    const float* src = x + (size_t)rows[blockIdx.x] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = src[c];
}
