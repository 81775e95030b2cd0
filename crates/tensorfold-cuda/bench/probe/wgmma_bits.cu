// wgmma_bits.cu: probe: does Hopper wgmma m64nNk16 bf16->f32 give the same f32 bits as a chain of mma.sync m16n8k16?
//
// Build and run (H200, CUDA 13.0): nvcc -O2 -arch=sm_90a -std=c++17 -o wgmma_bits wgmma_bits.cu && ./wgmma_bits
//
// Both paths compute D = C + A·B with A 64×K row-major bf16, B K×N bf16, C/D 64×N f32, walking K in k16 steps in
// increasing order and carrying the f32 accumulator in registers. mma.sync tiles it as 4×(N/8) warps of m16n8;
// wgmma as one warpgroup of m64nN. Every output element's bits are compared; an f64 host reference only tells a
// layout bug (error ~1) from tensor-core rounding (~1e-7..1e-5 of Σ|a·b|+|c|).
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); exit(2); } } while (0)

constexpr int M = 64;    // one wgmma M; four m16 tiles for mma.sync
constexpr int KC = 64;   // K chunk staged in shared memory per round (4 wgmma k16 steps per commit group)

// ---------------------------------------------------------------------------------------------------------------
// Kernel 1 (reference path): warp w owns the m16n8 tile (w%4, w/4) and runs mma.sync over k16 steps, k increasing.
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16), g = lane>>2, t = lane&3, low half of a .b32 = lower index:
//   A: r0 = A[g][2t..2t+1], r1 = A[g+8][2t..], r2 = A[g][2t+8..], r3 = A[g+8][2t+8..]
//   B: r0 = B[2t..2t+1][g], r1 = B[2t+8..2t+9][g]
//   C/D: c0,c1 = D[g][2t..2t+1], c2,c3 = D[g+8][2t..2t+1]
// ---------------------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

__global__ void k_mma_sync(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B, const float* __restrict__ C,
                           float* __restrict__ D, int K, int N) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int m0 = (warp & 3) * 16, n0 = (warp >> 2) * 8;
  const int r0 = m0 + g, r1 = m0 + g + 8, c = n0 + 2 * t;
  float d0 = C[r0 * N + c], d1 = C[r0 * N + c + 1], d2 = C[r1 * N + c], d3 = C[r1 * N + c + 1];
  for (int k0 = 0; k0 < K; k0 += 16) {
    const int ka = k0 + 2 * t;
    uint32_t a0 = pack2(A[r0 * K + ka], A[r0 * K + ka + 1]);
    uint32_t a1 = pack2(A[r1 * K + ka], A[r1 * K + ka + 1]);
    uint32_t a2 = pack2(A[r0 * K + ka + 8], A[r0 * K + ka + 9]);
    uint32_t a3 = pack2(A[r1 * K + ka + 8], A[r1 * K + ka + 9]);
    const int nb = n0 + g;
    uint32_t b0 = pack2(B[ka * N + nb], B[(ka + 1) * N + nb]);
    uint32_t b1 = pack2(B[(ka + 8) * N + nb], B[(ka + 9) * N + nb]);
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  D[r0 * N + c] = d0; D[r0 * N + c + 1] = d1; D[r1 * N + c] = d2; D[r1 * N + c + 1] = d3;
}

// ---------------------------------------------------------------------------------------------------------------
// Kernel 2: one warpgroup, wgmma m64nNk16. Operands in shared memory use the no-swizzle ("interleave") K-major
// canonical layout: a core matrix is 8 rows (M or N) × 16 bytes (8 bf16 along K), its 8 rows contiguous (128 B).
// Our tile of R rows × KC k is laid out core-matrix (rg, kg) at byte ((rg*(KC/8) + kg) * 128) + (r%8)*16 + (k%8)*2:
//   LBO (leading dim byte offset, K-major no-swizzle) = distance between the two K-adjacent core matrices = 128 B
//   SBO (stride dim byte offset) = distance between M/N-adjacent core matrices (8-row groups) = (KC/8)*128 = 1024 B
// Descriptor (PTX "Matrix Descriptor Format"): bits 0-13 start>>4, 16-29 LBO>>4, 32-45 SBO>>4, 49-51 base offset
// (0; unused without swizzle), 62-63 swizzle mode (0 = none). Each field is (x & 0x3FFFF) >> 4.
// k16 step s inside the chunk starts 2 core matrices further along K: start + s*2*LBO = start + s*256 B.
// imm-trans-a = imm-trans-b = 0 selects K-major for both (B stored as N×K, i.e. "col" like mma.sync's B).
// ---------------------------------------------------------------------------------------------------------------
constexpr uint32_t CM_BYTES = 128, LBO = CM_BYTES, SBO = (KC / 8) * CM_BYTES;

__device__ __forceinline__ int cm_index(int r, int k) {  // element index in the core-matrix tile (see above)
  return (((r >> 3) * (KC / 8) + (k >> 3)) * 64) + (r & 7) * 8 + (k & 7);
}

__device__ __forceinline__ uint64_t make_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
  uint64_t d = 0;
  d |= (uint64_t)((addr & 0x3FFFF) >> 4);
  d |= (uint64_t)((lbo & 0x3FFFF) >> 4) << 16;
  d |= (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
  // base offset (49-51) = 0 and swizzle mode (62-63) = 0: no swizzle
  return d;
}

// One wgmma per N and A source. scale-d is a predicate set to 1: D = A·B + D (the accumulator we loaded from C).
// imm-scale-a = imm-scale-b = 1 (no negation); SS form also takes imm-trans-a, imm-trans-b (0 = K-major);
// RS form (A in registers) only takes imm-trans-b.
template <int N, bool ASMEM> struct Wgmma;
template <> struct Wgmma<8, true> {
  static __device__ __forceinline__ void run(float* d, uint64_t da, const uint32_t*, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(da), "l"(db), "r"(1) : "memory");
  }
};
template <> struct Wgmma<8, false> {
  static __device__ __forceinline__ void run(float* d, uint64_t, const uint32_t* a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1) : "memory");
  }
};
#define D16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
            "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
template <> struct Wgmma<32, true> {
  static __device__ __forceinline__ void run(float* d, uint64_t da, const uint32_t*, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : D16 : "l"(da), "l"(db), "r"(1) : "memory");
  }
};
template <> struct Wgmma<32, false> {
  static __device__ __forceinline__ void run(float* d, uint64_t, const uint32_t* a, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
                 : D16 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1) : "memory");
  }
};

// One staged chunk: S k16 steps of wgmma in one commit group, then wait for all of them.
template <int N, bool ASMEM, int S>
__device__ __forceinline__ void chunk(float* d, const uint16_t* __restrict__ A, int K, int k0, int r0, int r1, int t,
                                      const uint16_t* sA, const uint16_t* sB) {
  uint32_t a[S][4] = {};
  if (!ASMEM)
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const int ka = k0 + 16 * s + 2 * t;
      a[s][0] = pack2(A[r0 * K + ka], A[r0 * K + ka + 1]);
      a[s][1] = pack2(A[r1 * K + ka], A[r1 * K + ka + 1]);
      a[s][2] = pack2(A[r0 * K + ka + 8], A[r0 * K + ka + 9]);
      a[s][3] = pack2(A[r1 * K + ka + 8], A[r1 * K + ka + 9]);
    }
  // Keep the compiler from sinking accumulator/A-register writes past the fence.
#pragma unroll
  for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
  // wgmma.fence: orders this thread's prior register writes (accumulator from C, A fragments) before wgmma reads.
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const uint64_t da = make_desc(sA + s * 2 * 64, LBO, SBO);  // k16 = 2 core matrices (2*64 elements) along K
    const uint64_t db = make_desc(sB + s * 2 * 64, LBO, SBO);
    Wgmma<N, ASMEM>::run(d, da, a[s], db);
  }
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int i = 0; i < N / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Register fragments for wgmma m64nNk16 (PTX ISA figures; same as CUTLASS ALayout_64x16 / CLayout_64xN): warp w of
// the warpgroup owns rows 16w..16w+15 and, inside them, the mma.m16n8k16 layout:
//   A regs: r0 = A[16w+g][2t..2t+1], r1 = A[16w+g+8][2t..], r2 = A[16w+g][2t+8..], r3 = A[16w+g+8][2t+8..]
//   D (f32, N/2 regs): d[4j+0,1] = D[16w+g][8j+2t..8j+2t+1], d[4j+2,3] = D[16w+g+8][8j+2t..8j+2t+1]
template <int N, bool ASMEM>
__global__ void __launch_bounds__(128) k_wgmma(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B,
                                               const float* __restrict__ C, float* __restrict__ D, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // nvcc 13's -arch=sm_90a also embeds plain compute_90 PTX: no wgmma there
  __shared__ __align__(1024) uint16_t sA[M * KC];
  __shared__ __align__(1024) uint16_t sB[N * KC];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  float d[N / 2];
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int c = 8 * j + 2 * t;
    d[4 * j + 0] = C[r0 * N + c]; d[4 * j + 1] = C[r0 * N + c + 1];
    d[4 * j + 2] = C[r1 * N + c]; d[4 * j + 3] = C[r1 * N + c + 1];
  }
  const int kc = K < KC ? K : KC, steps = kc / 16;
  for (int k0 = 0; k0 < K; k0 += kc) {
    __syncthreads();  // previous chunk's wgmmas have retired (wait_group 0 below) before smem is overwritten
    for (int i = tid; i < N * kc; i += 128) {  // B[k][n] -> K-major core-matrix tile (row = n)
      const int n = i / kc, k = i % kc;
      sB[cm_index(n, k)] = B[(k0 + k) * N + n];
    }
    if (ASMEM)
      for (int i = tid; i < M * kc; i += 128) {
        const int m = i / kc, k = i % kc;
        sA[cm_index(m, k)] = A[m * K + k0 + k];
      }
    // Generic-proxy st.shared must be made visible to the async proxy that wgmma reads smem through.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    // S is compile-time so the wgmmas of a chunk are back to back with no branch between them.
    if (steps == KC / 16) chunk<N, ASMEM, KC / 16>(d, A, K, k0, r0, r1, t, sA, sB);
    else chunk<N, ASMEM, 1>(d, A, K, k0, r0, r1, t, sA, sB);
  }
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    const int c = 8 * j + 2 * t;
    D[r0 * N + c] = d[4 * j + 0]; D[r0 * N + c + 1] = d[4 * j + 1];
    D[r1 * N + c] = d[4 * j + 2]; D[r1 * N + c + 1] = d[4 * j + 3];
  }
#else
  __trap();  // only reached if the driver JIT-ed the compute_90 PTX instead of loading the sm_90a cubin
#endif
}

// ---------------------------------------------------------------------------------------------------------------
// Host: data, f64 reference, comparison.
// ---------------------------------------------------------------------------------------------------------------
struct Rng {  // splitmix64: fixed seed, same stream on every machine
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() { uint64_t z = (s += 0x9E3779B97F4A7C15ull); z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
                    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; return z ^ (z >> 31); }
  double uni() { return (next() >> 11) * (1.0 / 9007199254740992.0); }                    // [0,1)
  int irange(int lo, int hi) { return lo + (int)(next() % (uint64_t)(hi - lo + 1)); }     // [lo,hi]
  double normal() { double u = uni(), v = uni(); if (u < 1e-300) u = 1e-300;
                    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v); }
};

static uint16_t f2bf(float f) {  // round to nearest even, as __float2bfloat16_rn
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static const char* REGIME[4] = {"normal", "mixed2^20", "int4xhilo", "cancel"};

// Fills A (M×K row-major) and B (K×N row-major) as bf16 for one regime.
static void fill(int regime, int K, int N, Rng& rng, std::vector<uint16_t>& A, std::vector<uint16_t>& B) {
  auto at = [&](int m, int k) -> uint16_t& { return A[(size_t)m * K + k]; };
  auto bt = [&](int k, int n) -> uint16_t& { return B[(size_t)k * N + n]; };
  auto big = [&](int elo, int ehi) {  // random sign × [1,2) mantissa × 2^e
    return f2bf((float)((rng.next() & 1 ? -1.0 : 1.0) * (1.0 + rng.uni()) * ldexp(1.0, rng.irange(elo, ehi))));
  };
  switch (regime) {
    case 0:  // (a) N(0,1)
      for (auto& x : A) x = f2bf((float)rng.normal());
      for (auto& x : B) x = f2bf((float)rng.normal());
      break;
    case 1:  // (b) exponents spread over ±20: stresses operand alignment and rounding inside the k16 sum
      for (auto& x : A) x = f2bf((float)(rng.normal() * ldexp(1.0, rng.irange(-20, 20))));
      for (auto& x : B) x = f2bf((float)(rng.normal() * ldexp(1.0, rng.irange(-20, 20))));
      break;
    case 2:  // (c) the project's feed: 4-bit codes centred to [-8,7] × activations split hi/lo over column pairs
      for (auto& x : A) x = f2bf((float)rng.irange(-8, 7));
      for (int k = 0; k < K; ++k)
        for (int n = 0; n < N; n += 2) {
          const float v = (float)rng.normal();
          const uint16_t hi = f2bf(v);
          bt(k, n) = hi;
          bt(k, n + 1) = f2bf(v - bf2f(hi));  // exact in f32, then rounded to bf16
        }
      break;
    case 3:  // (d) cancellation, pattern by k16 block b: b%4==0 pairs inside the block cancel (a·b + a·(-b(1+ε)));
             // 1 large random; 2 negated copy of block b-1 (cancels the accumulator); 3 small N(0,1)
      for (int k = 0; k < K; ++k) {
        const int p = (k / 16) % 4;
        for (int m = 0; m < M; ++m) {
          if (p == 0) at(m, k) = (k & 1) ? at(m, k - 1) : big(0, 12);
          else if (p == 1) at(m, k) = big(-8, 8);
          else if (p == 2) at(m, k) = at(m, k - 16);
          else at(m, k) = f2bf((float)rng.normal());
        }
        for (int n = 0; n < N; ++n) {
          const double eps = (rng.uni() * 2.0 - 1.0) * ldexp(1.0, -6);
          if (p == 0) bt(k, n) = (k & 1) ? f2bf((float)(-bf2f(bt(k - 1, n)) * (1.0 + eps))) : big(0, 6);
          else if (p == 1) bt(k, n) = f2bf((float)(rng.normal() * 16.0));
          else if (p == 2) bt(k, n) = f2bf((float)(-bf2f(bt(k - 16, n)) * (1.0 + eps)));
          else bt(k, n) = f2bf((float)rng.normal());
        }
      }
      break;
  }
}

template <int N, bool ASMEM>
static void launch_wgmma(const uint16_t* A, const uint16_t* B, const float* C, float* D, int K) {
  k_wgmma<N, ASMEM><<<1, 128>>>(A, B, C, D, K);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
}

int main() {
  int dev = 0; cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  if (prop.major != 9) { printf("VERDICT: not run (needs sm_90)\n"); return 1; }

  const int Ks[3] = {16, 64, 1024}, Ns[2] = {8, 32};
  uint16_t *dA, *dB; float *dC, *dDm, *dDw;
  CK(cudaMalloc(&dA, M * 1024 * 2)); CK(cudaMalloc(&dB, 1024 * 32 * 2));
  CK(cudaMalloc(&dC, M * 32 * 4)); CK(cudaMalloc(&dDm, M * 32 * 4)); CK(cudaMalloc(&dDw, M * 32 * 4));

  printf("# wgmma smem operands: no swizzle, K-major 8x16B core matrices, LBO=%u B (K) SBO=%u B (M/N), "
         "k16 step = %u B; mma.sync m16n8k16 chain as reference\n", LBO, SBO, 2 * LBO);
  printf("# rel = |x - f64| / (|c| + sum|a*b|) per element, max over the tile; layout bugs give ~1, rounding <1e-4\n");
  printf("# diff = elements whose f32 bits differ mma.sync vs wgmma (zsign: of which only +0/-0); wcloser: of the\n"
         "#        differing, how many wgmma is nearer the f64 value than mma.sync\n");
  printf("%-10s %5s %3s %5s %5s %6s %6s %5s %7s %12s %11s %11s\n", "regime", "K", "N", "A", "C", "elems", "diff",
         "zsign", "wcloser", "maxabsdiff", "rel_mma", "rel_wgmma");
  long long total = 0, differ = 0;
  int bad_layout = 0;
  for (int regime = 0; regime < 4; ++regime)
    for (int K : Ks)
      for (int N : Ns)
        for (int cstart = 0; cstart < 2; ++cstart) {
          Rng rng(0x5EEDull * 1000003ull + regime * 10007ull + K * 101ull + N * 7ull + cstart);
          std::vector<uint16_t> A((size_t)M * K), B((size_t)K * N);
          std::vector<float> C((size_t)M * N, 0.0f);
          fill(regime, K, N, rng, A, B);
          if (cstart) for (auto& x : C) x = (float)rng.normal();  // full f32 mantissa, not bf16-rounded
          CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
          CK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
          CK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
          std::vector<float> Dm((size_t)M * N), Dw((size_t)M * N);
          k_mma_sync<<<1, 32 * 4 * (N / 8)>>>(dA, dB, dC, dDm, K, N);
          CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
          CK(cudaMemcpy(Dm.data(), dDm, Dm.size() * 4, cudaMemcpyDeviceToHost));
          // f64 reference and the per-element scale |c| + Σ|a·b| (bf16 products are exact in f64)
          std::vector<double> ref((size_t)M * N), scale((size_t)M * N);
          for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
              double s = C[m * N + n], sa = fabs(s);
              for (int k = 0; k < K; ++k) {
                const double p = (double)bf2f(A[(size_t)m * K + k]) * (double)bf2f(B[(size_t)k * N + n]);
                s += p; sa += fabs(p);
              }
              ref[m * N + n] = s; scale[m * N + n] = sa > 0 ? sa : 1.0;
            }
          for (int asrc = 0; asrc < 2; ++asrc) {
            CK(cudaMemset(dDw, 0xff, Dw.size() * 4));  // NaN fill: an unwritten element cannot pass
            if (N == 8) asrc ? launch_wgmma<8, true>(dA, dB, dC, dDw, K) : launch_wgmma<8, false>(dA, dB, dC, dDw, K);
            else asrc ? launch_wgmma<32, true>(dA, dB, dC, dDw, K) : launch_wgmma<32, false>(dA, dB, dC, dDw, K);
            CK(cudaMemcpy(Dw.data(), dDw, Dw.size() * 4, cudaMemcpyDeviceToHost));
            int nd = 0, nz = 0, wc = 0, shown = 0;
            char ex[4][160];  // first differing element(s), printed under the case's line
            double maxabs = 0, relm = 0, relw = 0;
            for (size_t i = 0; i < Dm.size(); ++i) {
              const double em = fabs((double)Dm[i] - ref[i]), ew = fabs((double)Dw[i] - ref[i]);
              relm = (em == em) ? fmax(relm, em / scale[i]) : INFINITY;  // fmax would drop a NaN
              relw = (ew == ew) ? fmax(relw, ew / scale[i]) : INFINITY;
              if (fbits(Dm[i]) != fbits(Dw[i])) {
                ++nd;
                if (Dm[i] == 0.0f && Dw[i] == 0.0f) ++nz;
                if (ew < em) ++wc;
                const double ad = fabs((double)Dm[i] - (double)Dw[i]);
                maxabs = (ad == ad) ? fmax(maxabs, ad) : INFINITY;
                if (shown < (getenv("WGMMA_BITS_VERBOSE") ? 4 : 1)) {  // first differing element(s), for the log
                  snprintf(ex[shown++], sizeof ex[0], "    [m=%zu n=%zu] mma=%08x (%.9g) wgmma=%08x (%.9g) f64=%.17g",
                           i / N, i % N, fbits(Dm[i]), Dm[i], fbits(Dw[i]), Dw[i], ref[i]);
                }
              }
            }
            total += (long long)Dm.size(); differ += nd;
            if (relw > 1e-3 || relm > 1e-3) ++bad_layout;
            printf("%-10s %5d %3d %5s %5s %6zu %6d %5d %7d %12.5g %11.3g %11.3g%s\n", REGIME[regime], K, N,
                   asrc ? "smem" : "reg", cstart ? "rand" : "zero", Dm.size(), nd, nz, wc, maxabs, relm, relw,
                   (relw > 1e-3 || relm > 1e-3) ? "  <-- LAYOUT? (error ~ operand size)" : "");
            for (int e = 0; e < shown; ++e) printf("%s\n", ex[e]);
          }
        }
  CK(cudaFree(dA)); CK(cudaFree(dB)); CK(cudaFree(dC)); CK(cudaFree(dDm)); CK(cudaFree(dDw));
  if (bad_layout) printf("WARNING: %d comparisons have rel > 1e-3: a fragment/descriptor layout is wrong, so the "
                         "bit comparison there is meaningless\n", bad_layout);
  if (differ == 0) printf("VERDICT: identical\n");
  else printf("VERDICT: differs (%lld of %lld)\n", differ, total);
  return 0;
}
