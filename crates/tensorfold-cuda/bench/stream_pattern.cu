// stream_pattern.cu: microbenchmark behind the tile-major 4-bit layout (BENCHMARKS.md §7, call 25). Streams a
// 34816×5120 MLX 4-bit matrix (the 27B gate+up pair) through the decode kernel's cp.async pipeline with no math,
// row-major (the checkpoint's order) against tile-major. Run on the GPU machine:
//   nvcc -O3 -arch=sm_90 -std=c++17 --expt-extended-lambda stream_pattern.cu -o sp && ./sp
#include <cstdio>
#include <cuda_runtime.h>
typedef unsigned int u32;
__device__ __forceinline__ u32 sa(const void* p){ return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp16(u32 d, const void* s){ asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"::"r"(d),"l"(s):"memory"); }
__device__ __forceinline__ void cp4(u32 d, const void* s){ asm volatile("cp.async.ca.shared.global [%0], [%1], 4;"::"r"(d),"l"(s):"memory"); }
__device__ __forceinline__ void commit(){ asm volatile("cp.async.commit_group;":::"memory"); }
template<int N> __device__ __forceinline__ void waitg(){ asm volatile("cp.async.wait_group %0;"::"n"(N):"memory"); }
constexpr int D = 4, SB = 640;
template <int PAT, int W>
__global__ void __launch_bounds__(W*32) stream(const unsigned char* codes, const unsigned char* sc, const unsigned char* bi, u32* out, int groups) {
  __shared__ __align__(16) unsigned char smem[W * D * SB];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tile = blockIdx.x;
  unsigned char* pipe = smem + warp * D * SB;
  int n = (groups - warp + W - 1) / W;
  size_t rowbytes = (size_t)groups * 32;
  u32 acc = 0;
  auto issue = [&](int i) {
    int G = warp + i * W; u32 st = sa(pipe + (i % D) * SB);
    if (PAT == 0) {
      int r = lane / 2, part = lane % 2;
      cp16(st + lane * 16, codes + (size_t)(tile * 16 + r) * rowbytes + G * 32 + part * 16);
      int o = tile * 16 + (lane & 15);
      const unsigned char* b = lane < 16 ? sc : bi;
      cp4(st + 512 + lane * 4, (const void*)(((size_t)(b + ((size_t)o * groups + G) * 2)) & ~(size_t)3));
    } else {
      size_t blk = (size_t)tile * groups + G;
      cp16(st + lane * 16, codes + blk * 512 + lane * 16);
      if (lane < 4) cp16(st + 512 + lane * 16, sc + blk * 64 + lane * 16);
    }
  };
  for (int s = 0; s < D - 1; ++s) { if (s < n) issue(s); commit(); }
  for (int i = 0; i < n; ++i) {
    waitg<D - 2>(); __syncwarp();
    if (i + D - 1 < n) issue(i + D - 1);
    commit();
    const u32* w = (const u32*)(pipe + (i % D) * SB);
    acc ^= w[lane] + w[32 + lane] * 3 + w[64 + lane] + w[96 + lane] + w[128 + (lane & 31)];
  }
  if (acc == 0x12345678u) out[threadIdx.x] = acc;
}
int main() {
  const int outs = 34816, cols = 5120, groups = cols / 64;
  size_t cb = (size_t)outs * cols / 2, pb = (size_t)outs * groups * 2;
  unsigned char *codes, *sc, *bi; u32* o;
  cudaMalloc(&codes, cb); cudaMalloc(&sc, 2 * pb); cudaMalloc(&bi, pb); cudaMalloc(&o, 4096);
  cudaMemset(codes, 1, cb); cudaMemset(sc, 2, 2 * pb); cudaMemset(bi, 3, pb);
  unsigned char* dst; cudaMalloc(&dst, cb);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  double wb = cb + 2.0 * pb;
  auto timeit = [&](const char* name, auto f, double bytes) {
    for (int i = 0; i < 5; ++i) f();
    cudaEventRecord(a); for (int i = 0; i < 50; ++i) f(); cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); ms /= 50;
    printf("%-40s %8.1f us  %7.0f GB/s\n", name, ms * 1e3, bytes / (ms * 1e-3) / 1e9);
  };
  timeit("d2d copy (read+write, bytes of codes x2)", [&] { cudaMemcpyAsync(dst, codes, cb / 2, cudaMemcpyDeviceToDevice); }, (double)cb);
  timeit("row-major (today), 8 warps", [&] { stream<0, 8><<<outs / 16, 256>>>(codes, sc, bi, o, groups); }, wb);
  timeit("tile-major, 8 warps", [&] { stream<1, 8><<<outs / 16, 256>>>(codes, sc, bi, o, groups); }, wb);
  timeit("row-major (today), 16 warps", [&] { stream<0, 16><<<outs / 16, 512>>>(codes, sc, bi, o, groups); }, wb);
  timeit("tile-major, 16 warps", [&] { stream<1, 16><<<outs / 16, 512>>>(codes, sc, bi, o, groups); }, wb);
  timeit("row-major (today), 4 warps", [&] { stream<0, 4><<<outs / 16, 128>>>(codes, sc, bi, o, groups); }, wb);
  timeit("tile-major, 4 warps", [&] { stream<1, 4><<<outs / 16, 128>>>(codes, sc, bi, o, groups); }, wb);
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
