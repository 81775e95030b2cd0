// walk_order.cu: microbenchmark for the bf16 round kernels' DRAM efficiency (BENCHMARKS.md §7, call 185). Streams a
// row-major bf16 matrix (the checkpoint's layout) through project_wgmma_bf16's copy ring with no math: blocks of 64
// outputs, a stage = 128 bytes of each of the 64 rows (one 64-column group) plus x's 4 KB B tile, 3 stages; the
// group order and the block order vary:
//   res   a block walks residue r's groups (r, r + 8, …) then r + 1's, as the kernel does (unsplit)
//   seq   a block walks groups 0, 1, 2, … (the same bytes, each 1 KB of a row read in one stretch)
//   split-xfast  8 blocks an output block, one residue each, output blocks fastest in the grid (as the kernel)
//   split-rfast  the same blocks with the residues fastest (an output block's 8 blocks launched side by side)
// and, as the reference, the 1-row decode kernel's shape: 8 warps over one 16-row tile, warp w walking residue w.
// Run on the GPU machine: nvcc -O3 -arch=sm_90a -std=c++17 walk_order.cu -o wo && ./wo
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
typedef unsigned int u32;
typedef unsigned short u16;

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__device__ __forceinline__ u32 sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cpcg(u32 d, const void* s) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(s) : "memory");
}
__device__ __forceinline__ void cpca(u32 d, const void* s) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(d), "l"(s) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void waitg() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

constexpr int STAGES = 3, XB = 4096, WB = 8192, SB = XB + WB, NW = 8;

// ORDER 0: residue-major walk (unsplit) or one residue (split); 1: groups in order.
// SPLIT 0: grid.x output blocks; 1: grid (blocks, 8) output blocks fastest; 2: linear grid, residues fastest.
template <int ORDER, int SPLIT>
__global__ void __launch_bounds__(128, 4) wg_stream(const u16* __restrict__ w, const unsigned char* __restrict__ xt,
                                                    u32* out, int rows_out, int cols) {
    extern __shared__ __align__(1024) unsigned char ring[];
    const int tid = threadIdx.x, groups = cols / 64;
    int ob, r0;
    if (SPLIT == 0) { ob = blockIdx.x; r0 = 0; }
    else if (SPLIT == 1) { ob = blockIdx.x; r0 = blockIdx.y; }
    else { ob = blockIdx.x / NW; r0 = blockIdx.x % NW; }
    const int jobs = SPLIT ? (groups - 1 - r0) / NW + 1 : groups;
    const u16* src[4];
    int dst[4];
    for (int i = 0; i < 4; ++i) {
        const int c = tid + 128 * i, o = c >> 3, k = c & 7;
        src[i] = w + (size_t)min(ob * 64 + o, rows_out - 1) * cols + k * 8;
        dst[i] = XB + o * 128 + ((k ^ (o & 1)) * 16);
    }
    const u32 base = sa(ring);
    auto group_of = [&](int j) {
        if (SPLIT) return r0 + NW * j;
        if (ORDER == 1) return j;
        const int per = (groups + NW - 1) / NW;  // groups a residue (groups % 8 == 0 here)
        return (j % per) * NW + j / per;
    };
    auto issue = [&](int j) {
        const int G = group_of(j);
        const u32 s = base + (j % STAGES) * SB;
        cpca(s + tid * 16, xt + (size_t)G * XB + tid * 16);
        cpca(s + 2048 + tid * 16, xt + (size_t)G * XB + 2048 + tid * 16);
        for (int i = 0; i < 4; ++i) cpcg(s + dst[i], src[i] + (size_t)G * 64);
    };
    for (int s = 0; s < STAGES - 1; ++s) { if (s < jobs) issue(s); commit(); }
    u32 acc = 0;
    for (int j = 0; j < jobs; ++j) {
        waitg<STAGES - 2>();
        __syncthreads();
        if (j + STAGES - 1 < jobs) issue(j + STAGES - 1);
        commit();
        const unsigned char* st = ring + (j % STAGES) * SB;
        acc ^= *reinterpret_cast<const u32*>(st + XB + tid * 64) ^ *reinterpret_cast<const u32*>(st + tid * 32);
    }
    waitg<0>();
    if (acc == 0x12345679u) out[0] = acc;
}

// The 1-row decode kernel's shape: 8 warps a block over 16 outputs; warp w walks groups w, w + 8, …; a warp's stage
// is 16 rows × 128 bytes (4 copies a lane); 4 stages a warp.
__global__ void __launch_bounds__(256) nt1_stream(const u16* __restrict__ w, u32* out, int rows_out, int cols) {
    constexpr int D = 4, WS = 2048;
    extern __shared__ __align__(1024) unsigned char ring[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, groups = cols / 64;
    const int n = (groups - warp + NW - 1) / NW;
    const u32 base = sa(ring) + warp * D * WS;
    auto issue = [&](int i) {
        const int G = warp + NW * i;
        const u32 s = base + (i % D) * WS;
        for (int c = 0; c < 4; ++c) {
            const int q = lane + 32 * c, o = q >> 3, k = q & 7;
            cpcg(s + q * 16, w + (size_t)min(blockIdx.x * 16 + o, rows_out - 1) * cols + G * 64 + k * 8);
        }
    };
    for (int s = 0; s < D - 1; ++s) { if (s < n) issue(s); commit(); }
    u32 acc = 0;
    for (int i = 0; i < n; ++i) {
        waitg<D - 2>();
        __syncwarp();
        if (i + D - 1 < n) issue(i + D - 1);
        commit();
        acc ^= *reinterpret_cast<const u32*>(ring + warp * D * WS + (i % D) * WS + lane * 64);
    }
    waitg<0>();
    if (acc == 0x12345679u) out[0] = acc;
}

template <typename F>
float time_us(F launch, int reps = 15) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    launch();
    launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0f);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main() {
    // The 27B bf16 round launches: gate+up (unsplit in the kernel), qkv+z+b+a, down, out (split).
    const int outs[] = {34816, 16480, 5120, 5120}, colss[] = {5120, 5120, 17408, 6144};
    const char* names[] = {"gate+up 34816x5120", "qkvz 16480x5120", "down 5120x17408", "out 5120x6144"};
    const size_t max_bytes = (size_t)34816 * 5120 * 2, max_groups = 17408 / 64;
    u16* w;
    unsigned char* xt;
    u32* out;
    CK(cudaMalloc(&w, max_bytes));
    CK(cudaMalloc(&xt, max_groups * XB));
    CK(cudaMalloc(&out, 64));
    CK(cudaMemset(w, 1, max_bytes));
    CK(cudaMemset(xt, 2, max_groups * XB));
    // Copy bandwidth (read + write), as bench reports it.
    {
        size_t n = (size_t)1 << 30;
        void *a, *b;
        CK(cudaMalloc(&a, n));
        CK(cudaMalloc(&b, n));
        float us = time_us([&] { CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice)); }, 5);
        printf("copy: %.0f GB/s (read + write)\n", 2.0 * n / us / 1e3);
        CK(cudaFree(a));
        CK(cudaFree(b));
    }
    const int smem = STAGES * SB, smem1 = 8 * 4 * 2048;
    CK(cudaFuncSetAttribute(wg_stream<0, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(wg_stream<1, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(wg_stream<0, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(wg_stream<0, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(nt1_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem1));
    for (int m = 0; m < 4; ++m) {
        const int ro = outs[m], cols = colss[m], nb = (ro + 63) / 64;
        const double bytes = (double)ro * cols * 2;
        auto rep = [&](const char* what, float us) {
            printf("%-22s %-12s %8.1f us %6.0f GB/s\n", names[m], what, us, bytes / us / 1e3);
        };
        for (int pass = 0; pass < 2; ++pass) {
            rep("nt1 (1-row)", time_us([&] { nt1_stream<<<(ro + 15) / 16, 256, smem1>>>(w, out, ro, cols); }));
            rep("res", time_us([&] { wg_stream<0, 0><<<nb, 128, smem>>>(w, xt, out, ro, cols); }));
            rep("seq", time_us([&] { wg_stream<1, 0><<<nb, 128, smem>>>(w, xt, out, ro, cols); }));
            rep("split-xfast", time_us([&] { wg_stream<0, 1><<<dim3(nb, NW), 128, smem>>>(w, xt, out, ro, cols); }));
            rep("split-rfast", time_us([&] { wg_stream<0, 2><<<nb * NW, 128, smem>>>(w, xt, out, ro, cols); }));
        }
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    return 0;
}
