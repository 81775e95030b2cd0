// deltanet_fused.cu: a decode round's DeltaNet mixer (one row a slot) in one launch, with the bits of the three
// launches it replaces: each channel's conv and SiLU (dn_conv_at, as dn_conv), the recurrence step (dn_step on
// dn_recur_v{VM}'s state layout, as dn_recur_rows), and the gated RMSNorm with the output's tensor-core form
// (dn_norm_inv and dn_norm_value, as dn_norm).
//
// Why: a 1-row round of the 27B runs about 650 launches, and each small one costs a few µs of launch, wait and
// drain however little it does (BENCHMARKS.md §7: dn_conv, dn_recur_v2 and dn_norm took 6.5, 8.0 and 5.2 µs a
// layer in the event profile of call 144). Fused, a DeltaNet layer's mixer is one launch instead of three.
//
// A head's P blocks (8·VM value rows each, as dn_recur_v{VM}) are one thread-block cluster. Each block convolves
// the channels it needs (its key head's q and k, its own value rows; the 24 blocks of a key head repeat the q and k
// channels, a few hundred fmas each), steps its rows, and pushes its rows' outputs into every block of the cluster
// (distributed shared memory). After the cluster barrier every block holds the head's Dv outputs, and rank r
// finishes columns 32r … 32r + 31 (prepare_store_at sums 32 consecutive columns a warp) with dn_norm's sums.
// The host sends here only rounds of one row a slot (no restores, no snapshots) with Dv = 8·VM·P.

#ifdef TF_EMU
// The emulator runs a cluster's blocks as fibers of one block with one copy of static shared memory: one slice a
// rank, and a store to rank r's copy of a slice writes rank r's slice.
#define DNF_RANKS 8
#define DNF_MINE cluster_rank()
#else
#define DNF_RANKS 1
#define DNF_MINE 0
#endif

template <int VM, int P>
__device__ __forceinline__ void dn_decode_fused_run(
    const float* __restrict__ mixed, const float* __restrict__ conv_w, float* __restrict__ x,
    const u64* __restrict__ tails, const int* __restrict__ meta, const int* __restrict__ paths,
    const float* __restrict__ bg, const float* __restrict__ ag, const float* __restrict__ z, float* __restrict__ out,
    const float* __restrict__ norm_w, u16* __restrict__ oh, u16* __restrict__ ol, float* __restrict__ os,
    u16* __restrict__ obt, const float* __restrict__ a_log, const float* __restrict__ dt_bias,
    const u64* __restrict__ states, const int* __restrict__ list, int Hk, int Hv, int Dk, int Dv, int K, float eps,
    int prep) {
    constexpr int R = DN_WARPS * VM;  // value rows a block
    __shared__ __align__(16) float qk_[DNF_RANKS][2 * 32 * KMAX];  // the row's q, then k, of the key head
    __shared__ float v_[DNF_RANKS][R];                              // the block's value rows' v
    __shared__ float o_[DNF_RANKS][R * P];                          // the head's outputs before the norm
    __shared__ float scratch_[DNF_RANKS][32];
    float* qk = qk_[DNF_MINE];
    float* vs = v_[DNF_MINE];
    float* o = o_[DNF_MINE];
    float* scratch = scratch_[DNF_MINE];
    const DnBlock<VM> b(Hk, Hv, Dk, Dv);
    const int h = b.h, j0 = b.j0, kh = b.kh, KT = b.KT, C = b.C, rank = (int)(blockIdx.x % P);
    const int i = list[3 * b.s];  // the slot's one row (list entry s: one entry a slot)
    float* st = reinterpret_cast<float*>(states[b.s]) + h * b.hs;
    float S[VM][KMAX];
    dn_load<VM>(S, st, j0, Dk, Dv);
    // 1. The channels this block needs: q and k of key head kh (threads 0 … 2·Dk − 1), then its rows' v. The key
    //    head's first value head's rank 0 writes q and k to x, each block its own v (a replay of the round reads x).
    const int* m = meta + 5 * i;
    const bool writes_qk = h % (Hv / Hk) == 0 && rank == 0;
    for (int t = threadIdx.x; t < 2 * Dk + R; t += blockDim.x) {
        const int c = t < Dk ? kh * Dk + t : t < 2 * Dk ? KT + kh * Dk + (t - Dk) : 2 * KT + h * Dv + j0 + (t - 2 * Dk);
        const float val = dn_conv_at(mixed, conv_w, tails, m, paths, C, K, c);
        if (t < 2 * Dk) {
            qk[t < Dk ? t : 32 * KMAX + (t - Dk)] = val;
            if (writes_qk) x[(size_t)i * C + c] = val;
        } else {
            vs[t - 2 * Dk] = val;
            x[(size_t)i * C + c] = val;
        }
    }
    __syncthreads();
    // 2. The step, as dn_recur_rows takes it (its inputs as DnInputs::load reads them, from here instead of x).
    {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        float q[KMAX], k[KMAX], v[VM];
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = lane + 32 * kk;
            q[kk] = d < Dk ? qk[d] : 0.0f;
            k[kk] = d < Dk ? qk[32 * KMAX + d] : 0.0f;
        }
#pragma unroll
        for (int mm = 0; mm < VM; ++mm) v[mm] = vs[warp + DN_WARPS * mm];
        const float q_scale = 1.0f / sqrtf((float)Dk);
        const float neg_a = -expf(a_log[h]);
        dn_step<VM>(S, q, k, v, bg[(size_t)i * Hv + h], ag[(size_t)i * Hv + h] + dt_bias[h], q_scale, neg_a, o, j0,
                    Dv, 1);
    }
    dn_store<VM>(S, st, j0, Dk, Dv);
    __syncthreads();  // this block's outputs are in o[j0 …]
    // 3. Every block's outputs into every block: rank r's threads t < R·P push output j0 + t % R to rank t / R.
    cluster_wait();  // every block of the cluster has started: its shared memory may be written
    if (threadIdx.x < R * P) {
        const int to = threadIdx.x / R, j = j0 + threadIdx.x % R;
        if (to != rank) {
#ifdef TF_EMU
            o_[to][j] = o[j];
#else
            cluster_store(o + j, to, o[j]);
#endif
        }
    }
    cluster_arrive();
    cluster_wait();
    // 4. The gated norm (dn_norm's sums over the block's threads), rank r finishing columns 32r … 32r + 31.
    const float inv = dn_norm_inv(o, Dv, eps, scratch);
    const int j = 32 * rank + (int)threadIdx.x;
    if (threadIdx.x < 32 && 32 * rank < Dv && j < Dv) {
        const size_t ob = (size_t)i * Hv * Dv + (size_t)h * Dv;
        const float val = dn_norm_value(o[j], inv, norm_w[j], z[ob + j]);
        out[ob + j] = val;
        if (prep) prepare_store_at(ob + j, i, h * Dv + j, val, oh, ol, os, obt, Hv * Dv);
    }
}

// dn_decode_fused_v{VM}_c{P}: grid (Hv·P, slots), DN_WARPS·32 threads, clusters of the P blocks of a head.
#define DN_DECODE_FUSED(VM, P)                                                                                         \
    extern "C" __global__ void __launch_bounds__(DN_WARPS * 32) __cluster_dims__(P, 1, 1) dn_decode_fused_v##VM##_c##P( \
        const float* mixed, const float* conv_w, float* x, const u64* tails, const int* meta, const int* paths,        \
        const float* bg, const float* ag, const float* z, float* out, const float* norm_w, u16* oh, u16* ol,          \
        float* os, u16* obt, const float* a_log, const float* dt_bias, const u64* states, const int* list, int Hk,    \
        int Hv, int Dk, int Dv, int K, float eps, int prep) {                                                         \
        kernel_entry();                                                                                                \
        cluster_arrive_relaxed();                                                                                      \
        dn_decode_fused_run<VM, P>(mixed, conv_w, x, tails, meta, paths, bg, ag, z, out, norm_w, oh, ol, os, obt,     \
                                   a_log, dt_bias, states, list, Hk, Hv, Dk, Dv, K, eps, prep);                        \
    }
DN_DECODE_FUSED(1, 2)
DN_DECODE_FUSED(1, 4)
DN_DECODE_FUSED(1, 8)
DN_DECODE_FUSED(2, 8)
