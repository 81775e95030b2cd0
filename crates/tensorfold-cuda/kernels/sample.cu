// sample.cu: keyed draws where the logits are (Backend::draw_rows): per listed row the token that
// tensorfold-core's sampling::draw_keyed gives on the host, bit for bit: greedy argmax, or the Gumbel-max of
// l·inv_t + keyed noise over the whole vocabulary, hashed as on the host and with logs by keyed_ln, the host's
// own fixed sequence of IEEE operations. Every f64 operation is an explicit _rn intrinsic: the module is compiled
// with --fmad=true, which would otherwise fuse a multiply and an add into one rounding where the host has two.

#define DRAW_SPAN 8192     // logits per block of draw_partial
#define DRAW_THREADS 256

#ifdef TF_EMU
__device__ __forceinline__ double d_from_bits(u64 b) { double d; memcpy(&d, &b, 8); return d; }
__device__ __forceinline__ u64 d_bits(double d) { u64 b; memcpy(&b, &d, 8); return b; }
#else
__device__ __forceinline__ double d_from_bits(u64 b) { return __longlong_as_double((long long)b); }
__device__ __forceinline__ u64 d_bits(double d) { return (u64)__double_as_longlong(d); }
#endif

__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// sampling.rs keyed_ln, operation for operation (its constants as the same decimal literals).
__device__ double keyed_ln(double x) {
    const u64 bits = d_bits(x);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    double m = d_from_bits((bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    if (m > 1.4142135623730951) {
        m = __dmul_rn(m, 0.5);
        e += 1;
    }
    const double f = __dsub_rn(m, 1.0);
    const double s = __ddiv_rn(f, __dadd_rn(2.0, f));
    const double z = __dmul_rn(s, s);
    const double c[10] = {0.3333333333333333,  0.2,
                          0.14285714285714285, 0.1111111111111111,
                          0.09090909090909091, 0.07692307692307693,
                          0.06666666666666667, 0.058823529411764705,
                          0.05263157894736842, 0.047619047619047616};
    double p = c[9];
#pragma unroll
    for (int k = 8; k >= 0; --k) p = __dadd_rn(__dmul_rn(p, z), c[k]);
    const double r = __dmul_rn(s, __dmul_rn(z, p));
    const double k = (double)e;
    return __dadd_rn(__dmul_rn(k, 0.6931471803691238),
                     __dadd_rn(__dmul_rn(k, 1.9082149292705877e-10), __dmul_rn(2.0, __dadd_rn(s, r))));
}

// sampling.rs keyed_gumbel.
__device__ __forceinline__ double keyed_gumbel(u64 seed, u64 position, u32 token) {
    const u64 h = splitmix64(splitmix64(splitmix64(seed) ^ position) ^ (u64)token);
    const double u = __ddiv_rn(__dadd_rn((double)(h >> 11), 0.5), 9007199254740992.0);
    return -keyed_ln(-keyed_ln(u));
}

// Whether candidate (v, i) beats (bv, bi): the larger value, ties to the lower id, which is the host's first
// maximum. NaN never enters, so this is a total order and any reduction tree picks the same candidate.
__device__ __forceinline__ bool draw_beats(double v, int i, double bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// Block (span, d): the best candidate of draw d among logits [span·DRAW_SPAN, +DRAW_SPAN) of its row. desc holds
// per draw 5 words: logit row, 1 for greedy (else Gumbel), inv_t's bits, seed, position. Best value and id to
// pv / pi [d · spans + span]; id 0x7fffffff when nothing in the span is above −∞.
extern "C" __global__ void __launch_bounds__(DRAW_THREADS)
    draw_partial(const float* __restrict__ logits, const u64* __restrict__ desc, int vocab,
                 double* __restrict__ pv, int* __restrict__ pi) {
    kernel_entry();
    __shared__ double sv[DRAW_THREADS];
    __shared__ int si[DRAW_THREADS];
    const int d = blockIdx.y, span = blockIdx.x, tid = threadIdx.x;
    const u64* q = desc + 5 * (size_t)d;
    const float* row = logits + (size_t)q[0] * vocab;
    const bool greedy = q[1] != 0;
    const double inv_t = d_from_bits(q[2]);
    const u64 seed = q[3], position = q[4];
    double bv = d_from_bits(0xfff0000000000000ull);  // −∞
    int bi = 0x7fffffff;
    const int end = min((span + 1) * DRAW_SPAN, vocab);
    // Ascending ids with a strict >: each thread keeps its first maximum, as the host loop does.
    for (int i = span * DRAW_SPAN + tid; i < end; i += DRAW_THREADS) {
        const float l = row[i];
        if (l != l) continue;
        const double v = greedy ? (double)l : __dadd_rn(__dmul_rn((double)l, inv_t), keyed_gumbel(seed, position, (u32)i));
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    sv[tid] = bv;
    si[tid] = bi;
    __syncthreads();
    for (int s = DRAW_THREADS / 2; s > 0; s >>= 1) {
        if (tid < s && draw_beats(sv[tid + s], si[tid + s], sv[tid], si[tid])) {
            sv[tid] = sv[tid + s];
            si[tid] = si[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) {
        pv[(size_t)d * gridDim.x + span] = sv[0];
        pi[(size_t)d * gridDim.x + span] = si[0];
    }
}

// Block d: draw d's token from its spans' candidates (token 0 when no logit is above −∞, as on the host).
extern "C" __global__ void draw_finish(const double* __restrict__ pv, const int* __restrict__ pi, int spans,
                                       int* __restrict__ out) {
    kernel_entry();
    if (threadIdx.x != 0) return;
    const int d = blockIdx.x;
    double bv = d_from_bits(0xfff0000000000000ull);
    int bi = 0x7fffffff;
    for (int s = 0; s < spans; ++s) {
        const double v = pv[(size_t)d * spans + s];
        const int i = pi[(size_t)d * spans + s];
        if (draw_beats(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    out[d] = bv > d_from_bits(0xfff0000000000000ull) ? bi : 0;
}
