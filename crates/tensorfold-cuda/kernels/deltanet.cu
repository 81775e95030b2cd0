// deltanet.cu: Gated DeltaNet over a round. dn_conv: causal depthwise conv over (committed tail + the row's
// ancestors + the row) and SiLU. dn_recur_v*: per (slot, value head, part of the head's rows) block, the fp32
// delta rule stepped row by row from each row's parent state (restored from a snapshot or the round's start when
// the row branches), with the q/k L2 norms and gates fused; the state lives in registers, one warp per value-dim
// row; dn_recur_ring_v*, the same for chains with the rows' inputs staged and normalised once a block. dn_norm: the
// gated RMSNorm of each (row, head) output.
// A row's arithmetic is the same whether it is stepped in place, after a restore, or in a replay.

#define DN_WARPS 8
#define KMAX 4    // key_dim <= 128 (4 per lane)
// value_dim <= 128: at most 16 rows per warp (dn_recur_v16, one block per head)

// Launched with 256 threads; 8 blocks an SM (32 registers), the occupancy a memory-bound kernel needs (ptxas took 39
// registers once kernel_entry came first, and the prompt's conv ran 25% slower).
extern "C" __global__ void __launch_bounds__(256, 8)
    dn_conv(const float* __restrict__ mixed, const float* __restrict__ conv_w, float* __restrict__ x,
            const u64* __restrict__ tails, const int* __restrict__ meta, const int* __restrict__ paths, int C, int K) {
    kernel_entry();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (c >= C) return;
    const int* m = meta + 5 * i;
    const int slot = m[0], plen = m[4];
    const float* tail = reinterpret_cast<const float*>(tails[slot]);
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) {
        const int back = K - 1 - j;  // 0 = the row itself
        const float v = back < plen ? mixed[(size_t)path_at(m, paths, plen - 1 - back) * C + c]
                                    : tail[(size_t)(K - 2 - (back - plen)) * C + c];
        acc = fmaf(v, conv_w[(size_t)c * K + j], acc);
    }
    x[(size_t)i * C + c] = silu_f(acc);
}

// A block's share of a head's state: value-dim rows j0 + warp + DN_WARPS·m (m < VM), key dims lane + 32·kk.
template <int VM>
__device__ __forceinline__ void dn_load(float (&S)[VM][KMAX], const float* __restrict__ src, int j0, int Dk,
                                        int Dv) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < VM; ++m) {
        const int j = j0 + warp + DN_WARPS * m;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = lane + 32 * kk;
            S[m][kk] = (j < Dv && d < Dk) ? src[(size_t)j * Dk + d] : 0.0f;
        }
    }
}

template <int VM>
__device__ __forceinline__ void dn_store(const float (&S)[VM][KMAX], float* __restrict__ dst, int j0, int Dk,
                                         int Dv) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < VM; ++m) {
        const int j = j0 + warp + DN_WARPS * m;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = lane + 32 * kk;
            if (j < Dv && d < Dk) dst[(size_t)j * Dk + d] = S[m][kk];
        }
    }
}

// One entry's inputs to a block's step: its list triple, the row's q and k (key dims lane + 32·kk), the values
// of the block's state rows and the raw gate inputs.
template <int VM>
struct DnInputs {
    int i, restore, save;
    float q[KMAX], k[KMAX], v[VM], b, a;
    __device__ __forceinline__ void load(int e, const int* __restrict__ list, const float* __restrict__ x,
                                         const float* __restrict__ bg, const float* __restrict__ ag, int kh, int h,
                                         int j0, int KT, int C, int Hv, int Dk, int Dv) {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        i = list[3 * e];
        restore = list[3 * e + 1];
        save = list[3 * e + 2];
        const float* xr = x + (size_t)i * C;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) {
            const int d = lane + 32 * kk;
            q[kk] = d < Dk ? xr[kh * Dk + d] : 0.0f;
            k[kk] = d < Dk ? xr[KT + kh * Dk + d] : 0.0f;
        }
#pragma unroll
        for (int m = 0; m < VM; ++m) {
            const int j = j0 + warp + DN_WARPS * m;
            v[m] = j < Dv ? xr[2 * KT + h * Dv + j] : 0.0f;
        }
        b = bg[(size_t)i * Hv + h];
        a = ag[(size_t)i * Hv + h];
    }
};

// A row's q or k L2-normalised, times `scale` for q (key dims lane + 32·kk; the whole warp calls it). Every
// path normalises with these functions, so a row's q and k have the same bits wherever they are computed.
// dn_normalise_many: P vectors side by side (vector p is q when is_q(p)), their warp sums' shuffles interleaved.
template <int P, typename IsQ>
__device__ __forceinline__ void dn_normalise_many(float (&v)[P][KMAX], IsQ is_q, float q_scale) {
    float ss[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
        ss[p] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) ss[p] = fmaf(v[p][kk], v[p][kk], ss[p]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)  // warp_sum's tree for each vector
#pragma unroll
        for (int p = 0; p < P; ++p) ss[p] += __shfl_xor_sync(FULL_MASK, ss[p], off);
#pragma unroll
    for (int p = 0; p < P; ++p) {
        const float inv = 1.0f / sqrtf(ss[p] + 1e-6f);
        const bool q = is_q(p);
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) v[p][kk] = q ? (v[p][kk] * inv) * q_scale : v[p][kk] * inv;
    }
}
__device__ __forceinline__ void dn_normalise(float (&v)[KMAX], bool is_q, float q_scale) {
    dn_normalise_many<1>(reinterpret_cast<float(&)[1][KMAX]>(v), [&](int) { return is_q; }, q_scale);
}
__device__ __forceinline__ float dn_beta(float b) { return sigmoid_f(b); }
__device__ __forceinline__ float dn_decay(float a_dt, float neg_a) { return expf(neg_a * softplus_f(a_dt)); }

// The two halves of an entry's update of the block's state rows S (row m: value row j0 + warp + DN_WARPS·m, those
// with j < Dv). dn_advance: decay, prediction from the row's normalised k, and the delta rule with its values v and
// beta. dn_out_part: each lane's share of the output S·q, which dn_out_finish sums (written to orow[j] when
// write_out). Every path steps through these three, in this order for each row, so the bits are the same whether
// an entry's output is finished before the next entry advances (dn_update) or beside it (dn_recur_batch).
// FULL: the caller knows every row of the block is below Dv (no test, so that a caller's straight-line code stays
// one basic block that ptxas can interleave).
template <int VM, bool FULL = false>
__device__ __forceinline__ void dn_advance(float (&S)[VM][KMAX], const float (&kv)[KMAX], const float (&v)[VM],
                                           float beta, float decay, int j0, int Dv) {
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int m = 0; m < VM; ++m) {
        if (FULL || j0 + warp + DN_WARPS * m < Dv) {
            float p = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KMAX; ++kk) {
                S[m][kk] *= decay;
                p = fmaf(S[m][kk], kv[kk], p);
            }
            const float delta = beta * (v[m] - warp_sum(p));
#pragma unroll
            for (int kk = 0; kk < KMAX; ++kk) S[m][kk] = fmaf(delta, kv[kk], S[m][kk]);
        }
    }
}

template <int VM>
__device__ __forceinline__ void dn_out_part(const float (&S)[VM][KMAX], const float (&qv)[KMAX], float (&o)[VM]) {
#pragma unroll
    for (int m = 0; m < VM; ++m) {
        o[m] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) o[m] = fmaf(S[m][kk], qv[kk], o[m]);
    }
}

template <int VM, bool FULL = false>
__device__ __forceinline__ void dn_out_finish(const float (&o)[VM], float* __restrict__ orow, int j0, int Dv,
                                              int write_out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < VM; ++m) {
        const int j = j0 + warp + DN_WARPS * m;
        if (FULL || j < Dv) {
            const float t = warp_sum(o[m]);
            if (write_out && lane == 0) orow[j] = t;
        }
    }
}

// One entry's whole update: per row decay, delta rule and output.
template <int VM>
__device__ __forceinline__ void dn_update(float (&S)[VM][KMAX], const float (&qv)[KMAX], const float (&kv)[KMAX],
                                          const float (&v)[VM], float beta, float decay, float* __restrict__ orow,
                                          int j0, int Dv, int write_out) {
    float o[VM];
    dn_advance<VM>(S, kv, v, beta, decay, j0, Dv);
    dn_out_part<VM>(S, qv, o);
    dn_out_finish<VM>(o, orow, j0, Dv, write_out);
}

// One entry's whole step in one warp, from the row's raw q and k, values, beta input b and decay input a_dt
// (a + dt_bias).
template <int VM>
__device__ __forceinline__ void dn_step(float (&S)[VM][KMAX], const float (&q)[KMAX], const float (&k)[KMAX],
                                        const float (&v)[VM], float b, float a_dt, float q_scale, float neg_a,
                                        float* __restrict__ orow, int j0, int Dv, int write_out) {
    float qv[KMAX], kv[KMAX];
#pragma unroll
    for (int kk = 0; kk < KMAX; ++kk) {
        qv[kk] = q[kk];
        kv[kk] = k[kk];
    }
    dn_normalise(qv, true, q_scale);
    dn_normalise(kv, false, q_scale);
    dn_update<VM>(S, qv, kv, v, dn_beta(b), dn_decay(a_dt, neg_a), orow, j0, Dv, write_out);
}

// A dn_recur block's place: head h, its first value row j0 (8·VM rows a block), slot s, key head kh, the row
// layout of x (KT, C) and a head's state size hs.
template <int VM>
struct DnBlock {
    int h, j0, s, kh, KT, C;
    size_t hs;
    __device__ __forceinline__ DnBlock(int Hk, int Hv, int Dk, int Dv) {
        const int parts = (Dv + DN_WARPS * VM - 1) / (DN_WARPS * VM);
        h = blockIdx.x / parts;
        j0 = (blockIdx.x % parts) * DN_WARPS * VM;
        s = blockIdx.y;
        kh = h / (Hv / Hk);
        KT = Hk * Dk;
        C = 2 * KT + Hv * Dv;
        hs = (size_t)Dv * Dk;
    }
};

// Before a row that branches, S becomes the round's start state (restore −2) or snapshot `restore` (≥ 0).
template <int VM>
__device__ __forceinline__ void dn_restore(float (&S)[VM][KMAX], int restore, const u64* __restrict__ starts,
                                           const float* __restrict__ snaps, const DnBlock<VM>& b, int Hv, int Dk,
                                           int Dv) {
    if (restore == -2) dn_load<VM>(S, reinterpret_cast<const float*>(starts[b.s]) + b.h * b.hs, b.j0, Dk, Dv);
    else if (restore >= 0) dn_load<VM>(S, snaps + ((size_t)restore * Hv + b.h) * b.hs, b.j0, Dk, Dv);
}

// Entries `list[3e..]` = (round row, restore, save) for e in slot_off[s]..slot_off[s+1]: restore −1 = go on
// from the current state, −2 = the round's start state, k ≥ 0 = snapshot k; save k ≥ 0 = store the state after
// the row as snapshot k. x: dn_conv output [R, 2·Hk·Dk + Hv·Dv]; bg, ag: [R, Hv]; out: [R, Hv·Dv], each row's
// recurrent output before its gated norm (dn_norm finishes it).
//
// Block (h·parts + part, slot) steps the value-dim rows part·8·VM … of head h through the slot's entries. A row
// of the state is updated from its own values, the row's k, v, beta and decay alone, so splitting a head's rows
// over blocks (for parallelism: one block per head left most SMs idle, and a chained round stepped 16 rows in
// series in each) gives every row the arithmetic it has in one block. The q/k norms are recomputed per block,
// the same warp sums each time.
template <int VM>
__device__ __forceinline__ void dn_recur_rows(const float* __restrict__ x, const float* __restrict__ bg,
                                              const float* __restrict__ ag, float* __restrict__ out,
                                              const float* __restrict__ a_log, const float* __restrict__ dt_bias,
                                              const u64* __restrict__ states, const u64* __restrict__ starts,
                                              float* __restrict__ snaps, const int* __restrict__ list,
                                              const int* __restrict__ slot_off, int Hk, int Hv, int Dk, int Dv,
                                              int write_out) {
    const DnBlock<VM> b(Hk, Hv, Dk, Dv);
    const int h = b.h, j0 = b.j0, s = b.s, kh = b.kh, KT = b.KT, C = b.C;
    const size_t hs = b.hs;
    float* st = reinterpret_cast<float*>(states[s]) + h * hs;
    float S[VM][KMAX];
    dn_load<VM>(S, st, j0, Dk, Dv);
    const float q_scale = 1.0f / sqrtf((float)Dk);
    const float neg_a = -expf(a_log[h]);
    // The next entry's inputs are loaded before this entry's step (they do not depend on the state), so a
    // chain's steps do not each wait a memory latency; the values, and so the arithmetic, are the same.
    const int e_end = slot_off[s + 1];
    DnInputs<VM> cur, nxt;
    if (slot_off[s] < e_end) cur.load(slot_off[s], list, x, bg, ag, kh, h, j0, KT, C, Hv, Dk, Dv);
    for (int e = slot_off[s]; e < e_end; ++e) {
        if (e + 1 < e_end) nxt.load(e + 1, list, x, bg, ag, kh, h, j0, KT, C, Hv, Dk, Dv);
        const int i = cur.i, restore = cur.restore, save = cur.save;
        dn_restore<VM>(S, restore, starts, snaps, b, Hv, Dk, Dv);
        float* orow = out + (size_t)i * Hv * Dv + (size_t)h * Dv;
        dn_step<VM>(S, cur.q, cur.k, cur.v, cur.b, cur.a + dt_bias[h], q_scale, neg_a, orow, j0, Dv, write_out);
        if (save >= 0) dn_store<VM>(S, snaps + ((size_t)save * Hv + h) * hs, j0, Dk, Dv);
        cur = nxt;
    }
    dn_store<VM>(S, st, j0, Dk, Dv);
}

// The recurrence kernels: NAME##VM runs FN<VM> (dn_recur_rows, dn_recur_ring, or deltanet_batch.cu's
// dn_recur_batch, which gives the launch bounds BOUNDS: a parenthesised list).
#define DN_RECUR(NAME, FN, VM) DN_RECUR_BOUNDS(NAME, FN, VM, (DN_WARPS * 32))
#define DN_RECUR_BOUNDS(NAME, FN, VM, BOUNDS)                                                                   \
    extern "C" __global__ void __launch_bounds__ BOUNDS NAME##VM(                                               \
        const float* x, const float* bg, const float* ag, float* out, const float* a_log, const float* dt_bias, \
        const u64* states, const u64* starts, float* snaps, const int* list, const int* slot_off, int Hk,       \
        int Hv, int Dk, int Dv, int write_out) {                                                                \
        kernel_entry();                                                                                         \
        FN<VM>(x, bg, ag, out, a_log, dt_bias, states, starts, snaps, list, slot_off, Hk, Hv, Dk, Dv, write_out); \
    }
DN_RECUR(dn_recur_v, dn_recur_rows, 1)
DN_RECUR(dn_recur_v, dn_recur_rows, 2)
DN_RECUR(dn_recur_v, dn_recur_rows, 16)

// dn_recur_ring: dn_recur_rows for chains (prompt chunks, drafted rounds). Each entry's inputs are copied into a
// shared-memory ring DN_AHEAD − 1 entries ahead (cp.async; the list triple one entry before that), and one block's
// warps 0–3 normalise q and k and make the gates once per entry, one entry ahead of the step (dn_prepare), where
// dn_recur_rows has each of a head's 64 warps do it. A step of dn_recur_rows is bound by issuing instructions, not
// by its loads: staging alone changed nothing, preparing once made a 64-row chain's launch 22% shorter (calls 94,
// 96, BENCHMARKS.md §7). The values and the functions that step them are dn_recur_rows', so the bits are too.
#define DN_AHEAD 6

// A ring slot's floats: q and k (32·KMAX each), the block's value rows, b, a, the row, restore and save (ints),
// then what dn_prepare makes of them: the normalised q and k, beta and decay.
template <int VM>
struct DnSlot {
    static constexpr int K = 32 * KMAX, V = 2 * 32 * KMAX, B = V + DN_WARPS * VM, A = B + 1, I = A + 1;
    static constexpr int QN = (I + 3 + 3) & ~3, KN = QN + 32 * KMAX, BETA = KN + 32 * KMAX, DECAY = BETA + 1;
    static constexpr int FLOATS = (DECAY + 1 + 3) & ~3;  // 16-byte aligned
};

// Makes a landed slot's normalised q and k (warps 0 and 1), beta (warp 2) and decay (warp 3) once for the whole
// block, where dn_recur_rows has every warp compute them (call 95: that kernel issued an instruction in 64% of the
// scheduler cycles, the same norms and gates in each of a head's 64 warps).
template <int VM>
__device__ __forceinline__ void dn_prepare(float* in, float q_scale, float neg_a, float dtb) {
    typedef DnSlot<VM> Sl;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (warp < 2) {
        float v[KMAX];
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) v[kk] = in[warp * Sl::K + lane + 32 * kk];
        dn_normalise(v, warp == 0, q_scale);
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) in[(warp == 0 ? Sl::QN : Sl::KN) + lane + 32 * kk] = v[kk];
    } else if (warp == 2 && lane == 0) {
        in[Sl::BETA] = dn_beta(in[Sl::B]);
    } else if (warp == 3 && lane == 0) {
        in[Sl::DECAY] = dn_decay(in[Sl::A] + dtb, neg_a);
    }
}

// Entry e's list triple (row, restore, save).
struct DnEntry {
    int i, restore, save;
};
__device__ __forceinline__ DnEntry dn_entry(const int* __restrict__ list, int e) {
    return DnEntry{list[3 * e], list[3 * e + 1], list[3 * e + 2]};
}

// Copies entry n's inputs into ring slot `slot` (DnSlot's layout): thread t takes q (t < 32·KMAX) or k dim
// t % (32·KMAX), then value row t, b and a; zeros past Dk and Dv, as DnInputs loads them.
template <int VM>
__device__ __forceinline__ void dn_issue(float* slot, DnEntry n, const float* __restrict__ x,
                                         const float* __restrict__ bg, const float* __restrict__ ag, int kh, int h,
                                         int j0, int KT, int C, int Hv, int Dk, int Dv) {
    typedef DnSlot<VM> Sl;
    static_assert(DN_WARPS * 32 == 2 * 32 * KMAX && DN_WARPS * VM + 3 <= DN_WARPS * 32, "dn_issue's thread split");
    const int t = threadIdx.x;
    const float* xr = x + (size_t)n.i * C;
    const SmemAddr dst = smem_addr(reinterpret_cast<unsigned char*>(slot));
    const int d = t % (32 * KMAX), half = t / (32 * KMAX);  // half 0: q, 1: k
    cp_async4(dst + 4 * (half * Sl::K + d), xr + half * KT + kh * Dk + (d < Dk ? d : 0), d < Dk);
    if (t < DN_WARPS * VM) {
        const bool ok = j0 + t < Dv;
        cp_async4(dst + 4 * (Sl::V + t), xr + 2 * KT + h * Dv + (ok ? j0 + t : 0), ok);
    } else if (t == DN_WARPS * VM) {
        cp_async4(dst + 4 * Sl::B, bg + (size_t)n.i * Hv + h, true);
    } else if (t == DN_WARPS * VM + 1) {
        cp_async4(dst + 4 * Sl::A, ag + (size_t)n.i * Hv + h, true);
    } else if (t == DN_WARPS * VM + 2) {
        int* si = reinterpret_cast<int*>(slot) + Sl::I;
        si[0] = n.i;
        si[1] = n.restore;
        si[2] = n.save;
    }
}

// A staged slot `in` (dn_recur_ring's and dn_recur_batch's): the list triple at I (row, restore, save), the
// normalised q and k at QN and KN, the block's value rows at V, beta and decay at BETA and DECAY (Sl's offsets, in
// floats). dn_slot_advance and dn_slot_out_part are dn_advance and dn_out_part on a slot's values, dn_slot_orow
// where its output row goes.
template <int VM, typename Sl, bool FULL = false>
__device__ __forceinline__ void dn_slot_advance(float (&S)[VM][KMAX], const float* in, int j0, int Dv) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float kv[KMAX], v[VM];
#pragma unroll
    for (int kk = 0; kk < KMAX; ++kk) kv[kk] = in[Sl::KN + lane + 32 * kk];
#pragma unroll
    for (int m = 0; m < VM; ++m) v[m] = in[Sl::V + warp + DN_WARPS * m];
    dn_advance<VM, FULL>(S, kv, v, in[Sl::BETA], in[Sl::DECAY], j0, Dv);
}

template <int VM, typename Sl>
__device__ __forceinline__ void dn_slot_out_part(const float (&S)[VM][KMAX], const float* in, float (&o)[VM]) {
    const int lane = threadIdx.x & 31;
    float qv[KMAX];
#pragma unroll
    for (int kk = 0; kk < KMAX; ++kk) qv[kk] = in[Sl::QN + lane + 32 * kk];
    dn_out_part<VM>(S, qv, o);
}

template <typename Sl>
__device__ __forceinline__ float* dn_slot_orow(const float* in, float* __restrict__ out, int h, int Hv, int Dv) {
    return out + (size_t)reinterpret_cast<const int*>(in)[Sl::I] * Hv * Dv + (size_t)h * Dv;
}

// One entry's whole step from its staged slot: restore, update, output, save.
template <int VM, typename Sl>
__device__ __forceinline__ void dn_step_staged(float (&S)[VM][KMAX], const float* in, const DnBlock<VM>& b,
                                               const u64* __restrict__ starts, float* __restrict__ snaps,
                                               float* __restrict__ out, int Hv, int Dk, int Dv, int write_out) {
    const int* ini = reinterpret_cast<const int*>(in) + Sl::I;
    const int restore = ini[1], save = ini[2];
    float* orow = dn_slot_orow<Sl>(in, out, b.h, Hv, Dv);
    dn_restore<VM>(S, restore, starts, snaps, b, Hv, Dk, Dv);
    float o[VM];
    dn_slot_advance<VM, Sl>(S, in, b.j0, Dv);
    dn_slot_out_part<VM, Sl>(S, in, o);
    dn_out_finish<VM>(o, orow, b.j0, Dv, write_out);
    if (save >= 0) dn_store<VM>(S, snaps + ((size_t)save * Hv + b.h) * b.hs, b.j0, Dk, Dv);
}

template <int VM>
__device__ __forceinline__ void dn_recur_ring(const float* __restrict__ x, const float* __restrict__ bg,
                                              const float* __restrict__ ag, float* __restrict__ out,
                                              const float* __restrict__ a_log, const float* __restrict__ dt_bias,
                                              const u64* __restrict__ states, const u64* __restrict__ starts,
                                              float* __restrict__ snaps, const int* __restrict__ list,
                                              const int* __restrict__ slot_off, int Hk, int Hv, int Dk, int Dv,
                                              int write_out) {
    typedef DnSlot<VM> Sl;
    __shared__ __align__(16) float ring[DN_AHEAD][Sl::FLOATS];
    const DnBlock<VM> b(Hk, Hv, Dk, Dv);
    const int h = b.h, j0 = b.j0, s = b.s, kh = b.kh, KT = b.KT, C = b.C;
    const size_t hs = b.hs;
    float* st = reinterpret_cast<float*>(states[s]) + h * hs;
    float S[VM][KMAX];
    dn_load<VM>(S, st, j0, Dk, Dv);
    const float q_scale = 1.0f / sqrtf((float)Dk);
    const float neg_a = -expf(a_log[h]);
    const float dtb = dt_bias[h];
    const int e0 = slot_off[s], e_end = slot_off[s + 1];
    for (int f = 0; f < DN_AHEAD - 1; ++f) {
        if (e0 + f < e_end) dn_issue<VM>(ring[f], dn_entry(list, e0 + f), x, bg, ag, kh, h, j0, KT, C, Hv, Dk, Dv);
        cp_async_commit();
    }
    DnEntry next = {0, 0, 0};
    if (e0 + DN_AHEAD - 1 < e_end) next = dn_entry(list, e0 + DN_AHEAD - 1);
    // Entry e0 prepared before the loop; then each iteration prepares entry e + 1 while the block steps entry e.
    cp_async_wait<DN_AHEAD - 2>();
    __syncthreads();
    if (e0 < e_end) dn_prepare<VM>(ring[0], q_scale, neg_a, dtb);
    for (int e = e0; e < e_end; ++e) {
        cp_async_wait<DN_AHEAD - 3>();  // entries e and e + 1 have landed for this thread ...
        __syncthreads();  // ... and for all; entry e is prepared; every warp is done with entry e − 1's slot
        const int f = e + DN_AHEAD - 1;
        if (f < e_end) {
            dn_issue<VM>(ring[(f - e0) % DN_AHEAD], next, x, bg, ag, kh, h, j0, KT, C, Hv, Dk, Dv);
            if (f + 1 < e_end) next = dn_entry(list, f + 1);
        }
        cp_async_commit();
        if (e + 1 < e_end) dn_prepare<VM>(ring[(e + 1 - e0) % DN_AHEAD], q_scale, neg_a, dtb);
        dn_step_staged<VM, Sl>(S, ring[(e - e0) % DN_AHEAD], b, starts, snaps, out, Hv, Dk, Dv, write_out);
    }
    cp_async_wait<0>();
    dn_store<VM>(S, st, j0, Dk, Dv);
}

DN_RECUR(dn_recur_ring_v, dn_recur_ring, 1)
DN_RECUR(dn_recur_ring_v, dn_recur_ring, 2)
DN_RECUR(dn_recur_ring_v, dn_recur_ring, 16)

// The gated RMSNorm of one (row, value head) of dn_recur's output, in place: o·rsqrt(mean o² + eps)·w·silu(z),
// with the same per-thread sums and block_sum as a whole-head block would take (DN_WARPS warps, j = tid, tid +
// blockDim, …); and the output's tensor-core form when prep != 0 (Dv % 32 == 0: whole warps in range).
extern "C" __global__ void __launch_bounds__(DN_WARPS * 32)
    dn_norm(float* __restrict__ out, const float* __restrict__ z, const float* __restrict__ norm_w, u16* __restrict__ oh,
            u16* __restrict__ ol, float* __restrict__ os, u16* __restrict__ obt, int Hv, int Dv, float eps, int prep) {
    kernel_entry();
    __shared__ float scratch[32];
    const size_t ob = (size_t)blockIdx.x * Hv * Dv + (size_t)blockIdx.y * Dv;
    float ss = 0.0f;
    for (int j = threadIdx.x; j < Dv; j += blockDim.x) ss = fmaf(out[ob + j], out[ob + j], ss);
    ss = block_sum(ss, scratch);
    const float inv = 1.0f / sqrtf(ss / (float)Dv + eps);
    for (int j = threadIdx.x; j < Dv; j += blockDim.x) {
        const float v = norm_w[j] * (out[ob + j] * inv) * silu_f(z[ob + j]);
        out[ob + j] = v;
        if (prep) prepare_store_at(ob + j, blockIdx.x, blockIdx.y * Dv + j, v, oh, ol, os, obt, Hv * Dv);
    }
}

// The conv tails of every slot of a round after its kept rows, one launch for all: slot s (blockIdx.z) keeps the
// offs[2s + 1] rows listed at paths + offs[2s]; its new tail row t is row plen + t of (its old tail ++ those rows'
// mixed inputs). A decode round of many streams otherwise paid a launch a stream a layer.
extern "C" __global__ void dn_tail_keep(const u64* __restrict__ old_tails, const u64* __restrict__ mixeds,
                                        const u64* __restrict__ new_tails, const int* __restrict__ paths,
                                        const int* __restrict__ offs, int C, int K) {
    kernel_entry();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y, s = blockIdx.z;
    if (c >= C) return;
    const int* path = paths + offs[2 * s];
    const int idx = offs[2 * s + 1] + t;
    const float* old_tail = reinterpret_cast<const float*>(old_tails[s]);
    const float* mixed = reinterpret_cast<const float*>(mixeds[s]);
    float* new_tail = reinterpret_cast<float*>(new_tails[s]);
    new_tail[(size_t)t * C + c] =
        idx < K - 1 ? old_tail[(size_t)idx * C + c] : mixed[(size_t)path[idx - (K - 1)] * C + c];
}
