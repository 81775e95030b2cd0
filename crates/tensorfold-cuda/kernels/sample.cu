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

// ---- A cut draw's best ranks and softmax total (Backend::draw_rows for top-k, top-p and min-p draws): what
// tensorfold-core's sampling::row_top gives on the host, bit for bit; the host finishes the draw from them.

#define TOP_THREADS 1024  // = sampling::TOTAL_LANES: thread r is lane r of keyed_total's sum
#define TOP_MAX 1024      // = sampling::TOP_MAX
#define TOP_WORDS (4 + 2 * TOP_MAX)

__device__ __forceinline__ double pow2(int k) { return d_from_bits((u64)(k + 1023) << 52); }

// sampling.rs keyed_exp, operation for operation.
__device__ double keyed_exp(double x) {
    if (x != x) return x;
    if (x < -745.2) return 0.0;
    if (x > 709.7) return d_from_bits(0x7ff0000000000000ull);
    const double kf = floor(__dadd_rn(__dmul_rn(x, 1.4426950408889634), 0.5));
    const double r =
        __dsub_rn(__dsub_rn(x, __dmul_rn(kf, 0.6931471803691238)), __dmul_rn(kf, 1.9082149292705877e-10));
    const double c[14] = {1.6059043836821613e-10, 2.08767569878681e-09, 2.505210838544172e-08,
                          2.755731922398589e-07,  2.7557319223985893e-06, 2.48015873015873e-05,
                          0.0001984126984126984,  0.001388888888888889,  0.008333333333333333,
                          0.041666666666666664,   0.16666666666666666,   0.5,
                          1.0,                    1.0};
    double p = c[0];
#pragma unroll
    for (int i = 1; i < 14; ++i) p = __dadd_rn(__dmul_rn(p, r), c[i]);
    const int k = (int)kf;
    if (k < -1022) return __dmul_rn(__dmul_rn(p, pow2(k + 600)), pow2(-600));
    if (k > 1023) return __dmul_rn(__dmul_rn(p, pow2(k - 600)), pow2(600));
    return __dmul_rn(p, pow2(k));
}

// Order-preserving key of a logit that is not NaN: larger logit, larger key (−0 below +0, as total_cmp).
__device__ __forceinline__ u32 rank_key(float l) {
    const u32 b = __float_as_uint(l);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_logit(u32 k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Calls f(l, i) for the ids i = tid, tid + 1024, … below vocab in increasing order, TOP_UNROLL loads issued before
// any is used: a pass over a row by one block is bound by memory latency otherwise (285 µs for 248,320 logits with
// one load at a time, call 39). Past the end f sees NaN, which every caller skips.
#define TOP_UNROLL 8
template <typename F>
__device__ __forceinline__ void top_for_each(const float* __restrict__ row, int vocab, int tid, F f) {
    for (int base = tid; base < vocab; base += TOP_THREADS * TOP_UNROLL) {
        float l[TOP_UNROLL];
#pragma unroll
        for (int u = 0; u < TOP_UNROLL; ++u) {
            const int i = base + u * TOP_THREADS;
            l[u] = i < vocab ? row[i] : __uint_as_float(0x7fc00000u);
        }
#pragma unroll
        for (int u = 0; u < TOP_UNROLL; ++u) f(l[u], base + u * TOP_THREADS);
    }
}

// Block d: item d of desc (3 words: logit row, inv_t's bits, count) to out[d · TOP_WORDS ..]: the number of ranks
// c = min(count, valid), valid, keyed_total's two halves, then c ids and c logits' bits of the c best ranks in no
// order (the host sorts them). The c-th best key is found 8 bits at a time (a radix select); ties at it go to the
// lowest ids, as in the host's rank order.
extern "C" __global__ void __launch_bounds__(TOP_THREADS)
    row_top(const float* __restrict__ logits, const u64* __restrict__ desc, int vocab, u32* __restrict__ out) {
    kernel_entry();
    __shared__ double lanes[TOP_THREADS];
    __shared__ u32 ua[TOP_THREADS], ub[TOP_THREADS];
    __shared__ u32 hist[256];
    __shared__ u32 s_prefix, s_remaining, s_eq, s_pos;
    const int d = blockIdx.x, tid = threadIdx.x;
    const u64* q = desc + 3 * (size_t)d;
    const float* row = logits + (size_t)q[0] * vocab;
    const double inv_t = d_from_bits(q[1]);
    const u32 count = (u32)q[2];
    u32* o = out + (size_t)d * TOP_WORDS;
    // The best key and how many logits are not NaN.
    u32 best = 0, valid = 0;
    top_for_each(row, vocab, tid, [&](float l, int) {
        if (l != l) return;
        best = max(best, rank_key(l));
        valid += 1;
    });
    ua[tid] = best;
    ub[tid] = valid;
    __syncthreads();
    for (int h = TOP_THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) {
            ua[tid] = max(ua[tid], ua[tid + h]);
            ub[tid] += ub[tid + h];
        }
        __syncthreads();
    }
    best = ua[0];
    valid = ub[0];
    if (valid == 0) {
        if (tid < 4) o[tid] = 0;
        return;
    }
    // keyed_total: lane tid adds the ids ≡ tid (mod 1024) in increasing order, then the lanes pairwise.
    const double maxv = __dmul_rn((double)key_logit(best), inv_t);
    double s = 0.0;
    top_for_each(row, vocab, tid, [&](float l, int) {
        if (l == l) s = __dadd_rn(s, keyed_exp(__dsub_rn(__dmul_rn((double)l, inv_t), maxv)));
    });
    lanes[tid] = s;
    __syncthreads();
    for (int h = TOP_THREADS / 2; h > 0; h >>= 1) {
        if (tid < h) lanes[tid] = __dadd_rn(lanes[tid], lanes[tid + h]);
        __syncthreads();
    }
    // The c-th best key T, and how many of the keys equal to T the c best take.
    const u32 c = min(count, valid);
    u32 prefix = 0, mask = 0, remaining = c;
    for (int shift = 24; shift >= 0; shift -= 8) {
        if (tid < 256) hist[tid] = 0;
        __syncthreads();
        top_for_each(row, vocab, tid, [&](float l, int) {
            if (l != l) return;
            const u32 k = rank_key(l);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
        });
        __syncthreads();
        if (tid == 0) {
            u32 above = 0;
            int b = 255;
            for (; b > 0; --b) {
                if (above + hist[b] >= remaining) break;
                above += hist[b];
            }
            s_prefix = prefix | ((u32)b << shift);
            s_remaining = remaining - above;
            s_eq = hist[b];
            s_pos = 0;
        }
        __syncthreads();
        prefix = s_prefix;
        remaining = s_remaining;
        mask |= 255u << shift;
    }
    const u32 t = prefix, need_eq = remaining, above_n = c - remaining;
    const bool all_eq = s_eq == need_eq;
    // Every key above T (and every key equal to it when the c best take them all), in no order.
    top_for_each(row, vocab, tid, [&](float l, int i) {
        if (l != l) return;
        const u32 k = rank_key(l);
        if (k > t || (all_eq && k == t)) {
            const u32 j = atomicAdd(&s_pos, 1u);
            o[4 + j] = (u32)i;
            o[4 + TOP_MAX + j] = __float_as_uint(l);
        }
    });
    if (!all_eq) {
        // Ties at T cut inside: the lowest ids, by a scan of each 1024 ids in turn (rare: a cut through equal
        // logits, such as a flat or masked row).
        u32 taken = 0;
        for (int base = 0; base < vocab && taken < need_eq; base += TOP_THREADS) {
            const int i = base + tid;
            const bool f = i < vocab && row[i] == row[i] && rank_key(row[i]) == t;
            __syncthreads();
            ua[tid] = f ? 1u : 0u;
            __syncthreads();
            for (int h = 1; h < TOP_THREADS; h <<= 1) {  // inclusive prefix sums
                const u32 v = tid >= h ? ua[tid - h] : 0u;
                __syncthreads();
                ua[tid] += v;
                __syncthreads();
            }
            const u32 at = taken + ua[tid] - 1;
            if (f && at < need_eq) {
                o[4 + above_n + at] = (u32)i;
                o[4 + TOP_MAX + above_n + at] = __float_as_uint(row[i]);
            }
            taken += ua[TOP_THREADS - 1];
        }
    }
    if (tid == 0) {
        const u64 tb = d_bits(lanes[0]);
        o[0] = c;
        o[1] = valid;
        o[2] = (u32)tb;
        o[3] = (u32)(tb >> 32);
    }
}

// Thread i: edit i of desc (4 words: logit row, token, sub's bits, repetition's bits), sampling::LogitEdit::apply
// in place: l − sub, then divided by repetition when positive, else multiplied (the penalties). Each edit names a
// distinct logit.
extern "C" __global__ void edit_logits(float* __restrict__ x, const u32* __restrict__ desc, int n, int cols) {
    kernel_entry();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u32* q = desc + 4 * (size_t)i;
    float* p = x + (size_t)q[0] * cols + q[1];
    const float v = __fsub_rn(*p, __uint_as_float(q[2])), r = __uint_as_float(q[3]);
    *p = v > 0.0f ? __fdiv_rn(v, r) : __fmul_rn(v, r);
}
