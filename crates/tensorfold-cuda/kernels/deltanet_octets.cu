// deltanet_octets.cu: dn_recur_oct, deltanet_batch.cu's chain recurrence with a state row on eight lanes (an
// octet) instead of a warp: the same sums in the same tree, so the same bits, with 3 shuffles a sum for four rows
// where the warp layout took 5 for one. Call 168 (an H100): 27B bf16 prefills 1.9% (16k) and 2.4% (2k) faster,
// 16-row rounds unchanged; a step is held by its chain of dependent latencies, of which the shuffles were a part.
//
// Why: a step of dn_recur_batch_v2 gives each value row of the state a warp (key dims lane + 32·kk) and sums its
// two dot products (k·S, then q·S) with warp_sum: five shuffles each, each warp taking two rows, so about 20
// shuffles and 12 shared loads a warp a step for two rows, on the MIO pipe the whole SM shares. A 2,048-row prompt
// chunk's chain took 0.94 µs a row (call 128, the H200), several times its arithmetic.
//
// Here lane t of octet g (lane = 8g + t) holds the dims a warp's lanes t, t + 8, t + 16 and t + 24 held (its
// "virtual lanes" L_i = t + 8i, dims L_i + 32·kk). It makes each virtual lane's partial with the same fma chain
// over kk, then adds them as warp_sum's first two levels would (xor 16 pairs L_i with L_(i^2), xor 8 pairs
// i with i^1): (p0 + p2) + (p1 + p3), and the last three levels (xor 4, 2, 1) are shuffles inside the octet. A
// float sum is the same bits with its operands swapped, so every row's sums, and so every value, are warp_sum's.
// A warp takes four rows, so a step is 3 shuffles a sum for four rows.
//
// q and k are stored normalised "lane-major" (dim lane + 32·kk at 4·lane + kk): lane l's four dims are one
// float4, and a thread reads its four virtual lanes' dims as four 16-byte loads, an octet's eight threads 128
// contiguous bytes each.

#define DN_OCT_THREADS 128  // 4 warps
#define DN_OCT_ROWS 16      // value rows a block: 4 warps × 4 octets (a 128-row head is 8 blocks, as for v2)
#define DN_OCT_N 16         // entries a batch

// A slot's floats: q and k (raw as copied; lane-major once normalised), the block's value rows, b, a, the list
// triple (ints), beta and decay; 16-byte aligned.
struct DnOctSlot {
    static constexpr int Q = 0, K = 32 * KMAX, V = 2 * 32 * KMAX, B = V + DN_OCT_ROWS, A = B + 1, I = A + 1;
    static constexpr int BETA = I + 3, DECAY = BETA + 1;
    static constexpr int FLOATS = (DECAY + 1 + 3) & ~3;
};

// This thread's place: value row j0 + 4·warp + octet; t its lane in the octet.
struct DnOct {
    int r, t;
    __device__ __forceinline__ DnOct() {
        const int lane = threadIdx.x & 31;
        r = 4 * (threadIdx.x >> 5) + (lane >> 3);
        t = lane & 7;
    }
};

// The thread's state: S[i][kk] is dim t + 8i + 32·kk of its row (zeros past Dk and Dv, as dn_load).
__device__ __forceinline__ void oct_load(float (&S)[4][KMAX], const float* __restrict__ src, int j, int t, int Dk,
                                         int Dv) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = t + 8 * i + 32 * kk;
            S[i][kk] = (j < Dv && d < Dk) ? src[(size_t)j * Dk + d] : 0.0f;
        }
}

__device__ __forceinline__ void oct_store(const float (&S)[4][KMAX], float* __restrict__ dst, int j, int t, int Dk,
                                          int Dv) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = t + 8 * i + 32 * kk;
            if (j < Dv && d < Dk) dst[(size_t)j * Dk + d] = S[i][kk];
        }
}

// warp_sum of a row whose virtual lanes' partials are p: its levels xor 16 and 8 in the thread, 4, 2, 1 across
// the octet.
__device__ __forceinline__ float oct_sum(const float (&p)[4]) {
    float v = (p[0] + p[2]) + (p[1] + p[3]);
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
    return v;
}

// A lane-major vector's four float4s of virtual lanes t, t + 8, t + 16, t + 24.
__device__ __forceinline__ void oct_vec(const float* v, int t, float (&o)[4][KMAX]) {
    static_assert(KMAX == 4, "a virtual lane's dims are one float4");
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float4 f = *reinterpret_cast<const float4*>(v + 4 * (t + 8 * i));
        o[i][0] = f.x, o[i][1] = f.y, o[i][2] = f.z, o[i][3] = f.w;
    }
}

// dn_advance for the thread's row from slot `in`: decay, prediction, delta rule.
__device__ __forceinline__ void oct_advance(float (&S)[4][KMAX], const float* in, const DnOct& o) {
    typedef DnOctSlot Sl;
    float kv[4][KMAX], p[4];
    oct_vec(in + Sl::K, o.t, kv);
    const float decay = in[Sl::DECAY];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        p[i] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            S[i][kk] *= decay;
            p[i] = fmaf(S[i][kk], kv[i][kk], p[i]);
        }
    }
    const float delta = in[Sl::BETA] * (in[Sl::V + o.r] - oct_sum(p));
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) S[i][kk] = fmaf(delta, kv[i][kk], S[i][kk]);
}

// dn_out_part: the virtual lanes' partials of S·q.
__device__ __forceinline__ void oct_out_part(const float (&S)[4][KMAX], const float* in, const DnOct& o,
                                             float (&part)[4]) {
    float qv[4][KMAX];
    oct_vec(in + DnOctSlot::Q, o.t, qv);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        part[i] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) part[i] = fmaf(S[i][kk], qv[i][kk], part[i]);
    }
}

// dn_out_finish: the row's sum, written by the octet's lane 0.
__device__ __forceinline__ void oct_out_finish(const float (&part)[4], const float* in, float* __restrict__ out,
                                               const DnOct& o, int j0, int h, int Hv, int Dv, int write_out) {
    const float s = oct_sum(part);
    const int j = j0 + o.r;
    if (write_out && o.t == 0 && j < Dv)
        out[(size_t)reinterpret_cast<const int*>(in)[DnOctSlot::I] * Hv * Dv + (size_t)h * Dv + j] = s;
}

// dn_issue_batch for 128 threads: thread t copies q and k dim t of every entry, and its DN_EXTRA_WORD.
__device__ __forceinline__ void oct_issue(float* slots, int e0, int n, const int* rows, int rs,
                                          const int* __restrict__ list, const float* __restrict__ x,
                                          const float* __restrict__ bg, const float* __restrict__ ag, int kh, int h,
                                          int j0, int KT, int C, int Hv, int Dk, int Dv) {
    typedef DnOctSlot Sl;
    static_assert(DN_OCT_THREADS == 32 * KMAX && DN_OCT_ROWS + 5 <= DN_OCT_THREADS, "oct_issue's thread split");
    const int t = threadIdx.x;
    const SmemAddr dst = smem_addr(reinterpret_cast<unsigned char*>(slots));
    const bool dk = t < Dk;
    const float* q = x + kh * Dk + (dk ? t : 0);
    DN_EXTRA_WORD(DN_OCT_ROWS);
#pragma unroll
    for (int u = 0; u < DN_OCT_N; ++u) {
        if (u >= n) break;
        const SmemAddr s = dst + 4 * u * Sl::FLOATS;
        const size_t row = (size_t)rows[u * rs] * C;
        cp_async4(s + 4 * (Sl::Q + t), q + row, dk);
        cp_async4(s + 4 * (Sl::K + t), q + KT + row, dk);
        if (extra) cp_async4(s + 4 * at, base + (size_t)(by_entry ? e0 + u : rows[u * rs]) * stride, valid);
    }
}

// dn_prepare_batch for 4 warps: q and k normalised as dn_normalise does (a warp a vector) and stored lane-major
// in place; beta and decay (a thread an entry).
__device__ __forceinline__ void oct_prepare(float* slots, int n, float q_scale, float neg_a, float dtb) {
    typedef DnOctSlot Sl;
    constexpr int WARPS = DN_OCT_THREADS / 32, PER_WARP = 2 * DN_OCT_N / WARPS;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float v[PER_WARP][KMAX];
#pragma unroll
    for (int p = 0; p < PER_WARP; ++p) {
        const int vec = warp + WARPS * p;
        const float* src = slots + (vec < 2 * n ? vec >> 1 : 0) * Sl::FLOATS + (vec & 1) * Sl::K;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) v[p][kk] = vec < 2 * n ? src[lane + 32 * kk] : 0.0f;
    }
    __syncwarp();  // every lane has read its vectors before any is rewritten in place
    // Eight norms one after another would put eight warp sums in series; side by side, their shuffles interleave.
    dn_normalise_many<PER_WARP>(v, [&](int p) { return ((warp + WARPS * p) & 1) == 0; }, q_scale);
#pragma unroll
    for (int p = 0; p < PER_WARP; ++p) {
        const int vec = warp + WARPS * p;
        if (vec < 2 * n) {
            float* dst = slots + (vec >> 1) * Sl::FLOATS + (vec & 1) * Sl::K;
            const float4 f = {v[p][0], v[p][1], v[p][2], v[p][3]};
            *reinterpret_cast<float4*>(dst + 4 * lane) = f;
        }
    }
    const int t = threadIdx.x;
    if (t < n) {
        float* in = slots + t * Sl::FLOATS;
        in[Sl::BETA] = dn_beta(in[Sl::B]);
        in[Sl::DECAY] = dn_decay(in[Sl::A] + dtb, neg_a);
    }
}

// dn_chain_batch: entry u's output sum beside entry u + 1's advance.
__device__ __forceinline__ void oct_chain(float (&S)[4][KMAX], const float* slots, int n, const DnOct& o, int j0,
                                          int h, float* __restrict__ out, int Hv, int Dv, int write_out) {
    typedef DnOctSlot Sl;
    oct_advance(S, slots, o);
    int u = 0;
    for (; u + 1 < n; ++u) {
        const float* in = slots + u * Sl::FLOATS;
        float part[4];
        oct_out_part(S, in, o, part);
        oct_advance(S, in + Sl::FLOATS, o);
        oct_out_finish(part, in, out, o, j0, h, Hv, Dv, write_out);
    }
    const float* in = slots + u * Sl::FLOATS;
    float part[4];
    oct_out_part(S, in, o, part);
    oct_out_finish(part, in, out, o, j0, h, Hv, Dv, write_out);
}

// dn_recur_batch with the octet layout: block (h·parts + part, slot) steps value rows part·16 … of head h through
// the slot's entries (restore, step, save as dn_step_staged for batches that branch or save).
extern "C" __global__ void __launch_bounds__(DN_OCT_THREADS)
    dn_recur_oct(const float* __restrict__ x, const float* __restrict__ bg, const float* __restrict__ ag,
                 float* __restrict__ out, const float* __restrict__ a_log, const float* __restrict__ dt_bias,
                 const u64* __restrict__ states, const u64* __restrict__ starts, float* __restrict__ snaps,
                 const int* __restrict__ list, const int* __restrict__ slot_off, int Hk, int Hv, int Dk, int Dv,
                 int write_out) {
    kernel_entry();
    typedef DnOctSlot Sl;
    constexpr int NB = DN_OCT_N;
    write_out &= 1;
    __shared__ __align__(16) float ring[2][NB * Sl::FLOATS];
    __shared__ int rows[2][NB];
    const DnBlock<DN_OCT_ROWS / DN_WARPS> b(Hk, Hv, Dk, Dv);  // 16 rows a block, as DnBlock<2>
    const DnOct o;
    const int h = b.h, j0 = b.j0, s = b.s, kh = b.kh, KT = b.KT, C = b.C, j = j0 + o.r;
    const size_t hs = b.hs;
    float* st = reinterpret_cast<float*>(states[s]) + h * hs;
    float S[4][KMAX];
    oct_load(S, st, j, o.t, Dk, Dv);
    const float q_scale = 1.0f / sqrtf((float)Dk);
    const float neg_a = -expf(a_log[h]);
    const float dtb = dt_bias[h];
    const int e0 = slot_off[s], e_end = slot_off[s + 1];
    const int batches = (e_end - e0 + NB - 1) / NB;
    auto count = [&](int c) { return min(NB, e_end - (e0 + c * NB)); };
    if (batches > 0) oct_issue(ring[0], e0, count(0), list + 3 * e0, 3, list, x, bg, ag, kh, h, j0, KT, C, Hv, Dk, Dv);
    if (batches > 1) dn_issue_rows(rows[1], list, e0 + NB, count(1));
    cp_async_commit();
    for (int bi = 0; bi < batches; ++bi) {
        cp_async_wait<0>();  // batch bi's inputs and batch bi + 1's rows have landed for this thread ...
        __syncthreads();     // ... and for all
        if (bi + 1 < batches) {
            const int c = bi + 1;
            oct_issue(ring[c & 1], e0 + c * NB, count(c), rows[c & 1], 1, list, x, bg, ag, kh, h, j0, KT, C, Hv, Dk,
                      Dv);
            if (c + 1 < batches) dn_issue_rows(rows[(c + 1) & 1], list, e0 + (c + 1) * NB, count(c + 1));
        }
        cp_async_commit();
        float* slots = ring[bi & 1];
        const int n = count(bi);
        oct_prepare(slots, n, q_scale, neg_a, dtb);
        __syncthreads();  // the batch is prepared
        if (n > 0 && dn_batch_plain<Sl>(slots, n)) {
            oct_chain(S, slots, n, o, j0, h, out, Hv, Dv, write_out);
        } else {
            for (int u = 0; u < n; ++u) {
                const float* in = slots + u * Sl::FLOATS;
                const int* ini = reinterpret_cast<const int*>(in) + Sl::I;
                const int restore = ini[1], save = ini[2];
                if (restore == -2) oct_load(S, reinterpret_cast<const float*>(starts[s]) + h * hs, j, o.t, Dk, Dv);
                else if (restore >= 0) oct_load(S, snaps + ((size_t)restore * Hv + h) * hs, j, o.t, Dk, Dv);
                float part[4];
                oct_advance(S, in, o);
                oct_out_part(S, in, o, part);
                oct_out_finish(part, in, out, o, j0, h, Hv, Dv, write_out);
                if (save >= 0) oct_store(S, snaps + ((size_t)save * Hv + h) * hs, j, o.t, Dk, Dv);
            }
        }
        __syncthreads();  // every warp is done with the batch before its slots take batch bi + 2
    }
    cp_async_wait<0>();
    oct_store(S, st, j, o.t, Dk, Dv);
}
