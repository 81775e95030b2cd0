// emu.h: just enough of CUDA C to run this crate's kernels on a CPU, one block at a time, its threads as
// cooperative fibers (warp shuffles and barriers are real rendezvous), for testing kernel logic without a GPU.
#pragma once
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstring>
#include <algorithm>

#ifndef __global__
#define __global__
#endif
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
// A kernel's cluster size, for the kernel table (wrappers.py reads it through TF_CLUSTER); nothing in the code.
#ifndef TF_CLUSTER
#define TF_CLUSTER(n)
#endif
#define __cluster_dims__(x, y, z) TF_CLUSTER(x)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct uint3e { unsigned x, y, z; };
struct dim3e { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(8) float2 { float x, y; };

struct EmuThread;
extern thread_local EmuThread* emu_cur;
extern dim3e emu_block_idx, emu_block_dim, emu_grid_dim;
uint3e emu_thread_idx();
// The caller's block: a cluster's blocks run together, each fiber in its own (emu_block_idx is the cluster's first).
dim3e emu_block_index();
// The caller's rank in its cluster, and a barrier over every thread of the cluster (barrier.cluster's arrive and
// wait in one: the emulator's shared memory needs no release or acquire).
int emu_cluster_rank();
void emu_cluster_sync();
#define threadIdx (emu_thread_idx())
#define blockIdx (emu_block_index())
#define blockDim (emu_block_dim)
#define gridDim (emu_grid_dim)

// The launch's dynamic shared memory (its sharedMemBytes; blocks run one at a time, so one buffer serves them all).
unsigned char* emu_dynamic_smem();
void emu_syncwarp();
void emu_syncthreads();
float emu_shfl(float v, int src);
// Copies the n (at most EMU_EXCHANGE_WORDS) words `mine` of every lane of the caller's warp into all[lane·n …], after every lane has
// given its own: the operand exchange of one tensor-core instruction.
#define EMU_EXCHANGE_WORDS 8
void emu_warp_exchange(const unsigned* mine, int n, unsigned* all);
// cp.async as late as the GPU may do it: each copy waits in its thread's queue, and is made (source read,
// destination written; zeros when !valid) at the cp.async.wait_group that covers its group, or when the thread
// ends. So a kernel that reads shared memory its copies fill before it waits for them, or before a barrier
// after the issuing thread's wait, reads stale bytes here as it may on the GPU.
void emu_cp_async(void* dst, const void* src, int n, bool valid);
void emu_cp_async_commit();
void emu_cp_async_wait(int newest_left);
inline void __syncwarp(unsigned = 0xffffffffu) { emu_syncwarp(); }
inline void __syncthreads() { emu_syncthreads(); }
inline float __shfl_xor_sync(unsigned, float v, int off) { return emu_shfl(v, (int)(emu_thread_idx().x & 31) ^ off); }
inline float __shfl_sync(unsigned, float v, int src) { return emu_shfl(v, src); }

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
using std::min;
using std::max;
// IEEE double operations, each rounded once (x86-64 code has no fused multiply-add unless asked for).
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
// Fibers switch only at barriers and shuffles, so a plain read-modify-write is atomic here.
inline unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned o = *p; *p = o + v; return o; }
// Blocks run one at a time and their fibers switch only at barriers and shuffles: memory is always coherent.
inline void __threadfence() {}
inline float2 make_float2(float x, float y) { return float2{x, y}; }
template <typename T> inline T __ldcg(const T* p) { return *p; }
template <typename T> inline void __stcg(T* p, T v) { *p = v; }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = (unsigned long long)x | ((unsigned long long)y << 32);
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
    return r;
}

// The kernels' tensor-core and packed-bf16 instructions (project_mma.cu), in plain C++ for logic tests: the mma
// gathers its operands with real shuffles, so the fragment layouts are exercised as on the GPU.
#define TF_EMU 1
inline float emu_bf16_lo(unsigned v) { return __uint_as_float(v << 16); }
inline float emu_bf16_hi(unsigned v) { return __uint_as_float(v & 0xffff0000u); }
inline unsigned emu_bf16x2_sub136(unsigned v) {
    // Exact here: both halves are 128 + q with q < 16, and q − 8 is a small integer.
    const unsigned lo = __float_as_uint(emu_bf16_lo(v) - 136.0f) >> 16;
    const unsigned hi = __float_as_uint(emu_bf16_hi(v) - 136.0f) >> 16;
    return lo | (hi << 16);
}
inline void emu_mma_bf16(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                         unsigned b1) {
    const int lane = (int)(emu_thread_idx().x & 31), g = lane >> 2, t = lane & 3;
    // Every lane's six operand words at once (one rendezvous, not one per shuffle), then each lane gathers its A
    // rows and B columns from them as the mma's shuffles would.
    const unsigned mine[6] = {a0, a1, a2, a3, b0, b1};
    unsigned all[32][6];
    emu_warp_exchange(mine, 6, &all[0][0]);
    float A[2][16], B[2][16];
    for (int q = 0; q < 4; ++q) {
        const unsigned* r = all[g * 4 + q];
        A[0][2 * q] = emu_bf16_lo(r[0]); A[0][2 * q + 1] = emu_bf16_hi(r[0]);
        A[1][2 * q] = emu_bf16_lo(r[1]); A[1][2 * q + 1] = emu_bf16_hi(r[1]);
        A[0][2 * q + 8] = emu_bf16_lo(r[2]); A[0][2 * q + 9] = emu_bf16_hi(r[2]);
        A[1][2 * q + 8] = emu_bf16_lo(r[3]); A[1][2 * q + 9] = emu_bf16_hi(r[3]);
        for (int c = 0; c < 2; ++c) {
            const unsigned* b = all[(2 * t + c) * 4 + q];
            B[c][2 * q] = emu_bf16_lo(b[4]); B[c][2 * q + 1] = emu_bf16_hi(b[4]);
            B[c][2 * q + 8] = emu_bf16_lo(b[5]); B[c][2 * q + 9] = emu_bf16_hi(b[5]);
        }
    }
    for (int m = 0; m < 2; ++m)
        for (int c = 0; c < 2; ++c) {
            // From −0, so that a step whose products are all −0 sums to −0 (IEEE), then C added. A zero result is
            // +0 whatever the signs, as the tensor cores give it (call 161, backend-ops' zero-sign rows): so a
            // wgmma step that takes no C (project_mma.cu FRESH_GROUPS) is modelled by a C of +0.
            float s = -0.0f;
            for (int k = 0; k < 16; ++k) s = std::fma(A[m][k], B[c][k], s);
            const float r = d[2 * m + c] + s;
#ifdef EMU_IEEE_ZERO_SUMS
            d[2 * m + c] = r;  // (a device whose zero sums keep IEEE's sign: backend-ops' zero-sign rows then see it)
#else
            d[2 * m + c] = r == 0.0f ? 0.0f : r;
#endif
        }
}
