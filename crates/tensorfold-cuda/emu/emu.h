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
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct uint3e { unsigned x, y, z; };
struct dim3e { unsigned x, y, z; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };

struct EmuThread;
extern thread_local EmuThread* emu_cur;
extern dim3e emu_block_idx, emu_block_dim, emu_grid_dim;
uint3e emu_thread_idx();
#define threadIdx (emu_thread_idx())
#define blockIdx (emu_block_idx)
#define blockDim (emu_block_dim)
#define gridDim (emu_grid_dim)

void emu_syncwarp();
void emu_syncthreads();
float emu_shfl(float v, int src);
inline void __syncwarp(unsigned = 0xffffffffu) { emu_syncwarp(); }
inline void __syncthreads() { emu_syncthreads(); }
inline float __shfl_xor_sync(unsigned, float v, int off) { return emu_shfl(v, (int)(emu_thread_idx().x & 31) ^ off); }
inline float __shfl_sync(unsigned, float v, int src) { return emu_shfl(v, src); }

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
using std::min;
using std::max;
