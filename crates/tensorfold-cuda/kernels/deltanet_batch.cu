// deltanet_batch.cu: dn_recur_batch_v*, deltanet.cu's recurrence for chains (prompt chunks, drafted rounds, replays)
// with its inputs staged and prepared a batch of rows at a time (deltanet.rs says when it runs).
//
// dn_recur_ring copies one entry a step into its ring and prepares entry e + 1 beside step e: a barrier, a copy and
// a preparation on the path of every step, about 1.3 µs a row (a 2,048-row prompt chunk's launch took 2.66 ms on the
// 27B shape, call 124). Here the block copies its entries' inputs into shared memory a batch of DnBatch::N at a time
// (cp.async, one batch ahead), normalises the batch's q and k and makes its gates all at once (a warp a vector, the
// warps side by side), then steps the batch's entries with no barrier between them, a chain's with each entry's
// output sum beside the next entry's advance (dn_chain_batch). The values and the functions that make and step them
// are dn_recur_rows', so the bits are too.

// Entries a batch (two batches of slots fit 48 KB of static shared memory).
template <int VM>
struct DnBatch {
    static constexpr int N = VM == 16 ? 8 : 16;
};

// A slot's floats: q and k (32·KMAX each; normalised in place once landed), the block's value rows, b, a, the row,
// restore and save (ints), then beta and decay.
template <int VM>
struct DnBatchSlot {
    static constexpr int K = 32 * KMAX, V = 2 * 32 * KMAX, B = V + DN_WARPS * VM, A = B + 1, I = A + 1;
    static constexpr int BETA = I + 3, DECAY = BETA + 1;
    static constexpr int FLOATS = DECAY + 1;
    static constexpr int QN = 0, KN = K;  // the normalised q and k (dn_step_staged)
};

// The one word beside q and k that thread t copies of each entry, when `extra`: value row t (t < ROWS, the value
// rows its block stages), b, a, or a word of the list triple, at base + index·stride, where the index is the entry's
// row, or the entry itself for the list (by_entry), to slot float `at` (Sl's V, B, A, I); zeros past Dv (valid), as
// DnInputs loads them. A macro, not a function: the batched kernel's machine code, which the GPU checked, stays as
// it was (a helper struct instead changed a few of its integer instructions, by cuobjdump -sass).
#define DN_EXTRA_WORD(ROWS)                                                                               \
    const int w = t - (ROWS);                                                                             \
    const bool value = w < 0, by_entry = w >= 2;                                                          \
    const bool extra = w < 5, valid = value ? j0 + t < Dv : true;                                         \
    const float* base = value ? x + 2 * KT + h * Dv + (valid ? j0 + t : 0)                                \
                        : w == 0  ? bg + h                                                                \
                        : w == 1  ? ag + h                                                                \
                                  : reinterpret_cast<const float*>(list) + (w - 2);                       \
    const size_t stride = value ? (size_t)C : by_entry ? 3 : (size_t)Hv;                                  \
    const int at = value ? Sl::V + t : w == 0 ? Sl::B : w == 1 ? Sl::A : Sl::I + (w - 2)

// Copies entries e0 … e0 + n − 1 (rows[u·rs] = entry e0 + u's row: the list itself, or a copy of the rows in shared
// memory; n ≤ DnBatch::N) into slots[0..n): thread t takes q
// (t < 32·KMAX) or k dim t % (32·KMAX) of every entry, and one more word of each: value row t (t < DN_WARPS·VM), b,
// a, or a word of the list triple; zeros past Dk and Dv, as DnInputs loads them. Each thread's sources are fixed
// up front, so a copy is an address and a cp.async.
template <int VM>
__device__ __forceinline__ void dn_issue_batch(float* slots, int e0, int n, const int* rows, int rs,
                                               const int* __restrict__ list, const float* __restrict__ x,
                                               const float* __restrict__ bg, const float* __restrict__ ag, int kh,
                                               int h, int j0, int KT, int C, int Hv, int Dk, int Dv) {
    typedef DnBatchSlot<VM> Sl;
    static_assert(DN_WARPS * 32 == 2 * 32 * KMAX && DN_WARPS * VM + 5 <= DN_WARPS * 32, "dn_issue_batch's split");
    const int t = threadIdx.x;
    const SmemAddr dst = smem_addr(reinterpret_cast<unsigned char*>(slots));
    const int d = t % (32 * KMAX), half = t / (32 * KMAX);  // half 0: q, 1: k
    const float* qk = x + half * KT + kh * Dk + (d < Dk ? d : 0);
    DN_EXTRA_WORD(DN_WARPS * VM);
#pragma unroll
    for (int u = 0; u < DnBatch<VM>::N; ++u) {
        if (u >= n) break;
        const SmemAddr s = dst + 4 * u * Sl::FLOATS;
        const int row = rows[u * rs];
        cp_async4(s + 4 * (half * Sl::K + d), qk + (size_t)row * C, d < Dk);
        if (extra) cp_async4(s + 4 * at, base + (size_t)(by_entry ? e0 + u : row) * stride, valid);
    }
}

// Copies the rows of entries e0 … e0 + n − 1 (the first word of each list triple) into rows[0..n).
__device__ __forceinline__ void dn_issue_rows(int* rows, const int* __restrict__ list, int e0, int n) {
    const int t = threadIdx.x;
    if (t < n) cp_async4(smem_addr(reinterpret_cast<unsigned char*>(rows + t)), list + 3 * (e0 + t), true);
}

// Makes a landed batch of n entries ready to step, in place: q and k normalised (a warp a vector, the block's warps
// side by side), beta and decay (a thread an entry).
template <int VM>
__device__ __forceinline__ void dn_prepare_batch(float* slots, int n, float q_scale, float neg_a, float dtb) {
    typedef DnBatchSlot<VM> Sl;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    constexpr int PER_WARP = 2 * DnBatch<VM>::N / DN_WARPS;
    static_assert(PER_WARP * DN_WARPS == 2 * DnBatch<VM>::N, "a batch's vectors split evenly over the warps");
    float v[PER_WARP][KMAX];
    // Vector w + DN_WARPS·p: entry (w + DN_WARPS·p) / 2, its q when even, its k when odd; a batch of n entries has
    // 2n (the tests are the same for a whole warp; vectors past 2n are zeros, never used). The loads first, so that
    // they are in flight together (ptxas still makes each norm's sum, square root and division in turn).
#pragma unroll
    for (int p = 0; p < PER_WARP; ++p) {
        const int vec = warp + DN_WARPS * p;
        const bool used = vec < 2 * n;
        const float* src = slots + (used ? vec >> 1 : 0) * Sl::FLOATS + (vec & 1) * Sl::K;
#pragma unroll
        for (int kk = 0; kk < KMAX; ++kk) v[p][kk] = used ? src[lane + 32 * kk] : 0.0f;
    }
#pragma unroll
    for (int p = 0; p < PER_WARP; ++p) {
        const int vec = warp + DN_WARPS * p;
        if (vec < 2 * n) {
            dn_normalise(v[p], (vec & 1) == 0, q_scale);
            float* dst = slots + (vec >> 1) * Sl::FLOATS + (vec & 1) * Sl::K;
#pragma unroll
            for (int kk = 0; kk < KMAX; ++kk) dst[lane + 32 * kk] = v[p][kk];
        }
    }
    const int t = threadIdx.x;
    if (t < n) {
        float* in = slots + t * Sl::FLOATS;
        in[Sl::BETA] = dn_beta(in[Sl::B]);
        in[Sl::DECAY] = dn_decay(in[Sl::A] + dtb, neg_a);
    }
}

// Whether a prepared batch's n entries all go on from the current state and save none (a chain's entries: no
// dn_restore or snapshot between steps). The same answer in every thread.
template <typename Sl>
__device__ __forceinline__ bool dn_batch_plain(const float* slots, int n) {
    const int lane = threadIdx.x & 31;
    const int* ini = reinterpret_cast<const int*>(slots + (lane < n ? lane : 0) * Sl::FLOATS) + Sl::I;
    return warp_sum(lane < n && (ini[1] != -1 || ini[2] >= 0) ? 1.0f : 0.0f) == 0.0f;
}

// A plain batch stepped with each entry's output sum beside the next entry's advance: dn_out_part of entry u, then
// dn_advance of u + 1 (it needs only the state after u), then dn_out_finish of u. The two warp sums are independent
// and, with FULL (no row tests), in one basic block, so ptxas interleaves them; each step's own path is then its
// advance alone, where dn_step_staged waits for the output sum too. Each row goes through the same three functions
// in the same order as dn_update, so the bits are dn_step_staged's.
template <int VM, typename Sl, bool FULL>
__device__ __forceinline__ void dn_chain_batch(float (&S)[VM][KMAX], const float* slots, int n, const DnBlock<VM>& b,
                                               float* __restrict__ out, int Hv, int Dv, int write_out) {
    dn_slot_advance<VM, Sl, FULL>(S, slots, b.j0, Dv);
    int u = 0;
    for (; u + 1 < n; ++u) {
        const float* in = slots + u * Sl::FLOATS;
        float o[VM];
        dn_slot_out_part<VM, Sl>(S, in, o);
        dn_slot_advance<VM, Sl, FULL>(S, in + Sl::FLOATS, b.j0, Dv);
        dn_out_finish<VM, FULL>(o, dn_slot_orow<Sl>(in, out, b.h, Hv, Dv), b.j0, Dv, write_out);
    }
    const float* in = slots + u * Sl::FLOATS;
    float o[VM];
    dn_slot_out_part<VM, Sl>(S, in, o);
    dn_out_finish<VM, FULL>(o, dn_slot_orow<Sl>(in, out, b.h, Hv, Dv), b.j0, Dv, write_out);
}

// write_out's bit 0 asks for the outputs; its bit 1 lets plain batches take dn_chain_batch (deltanet.rs sets it
// unless TENSORFOLD_CUDA_DN_PIPE=0; the bits are the same either way).
template <int VM>
__device__ __forceinline__ void dn_recur_batch(const float* __restrict__ x, const float* __restrict__ bg,
                                              const float* __restrict__ ag, float* __restrict__ out,
                                              const float* __restrict__ a_log, const float* __restrict__ dt_bias,
                                              const u64* __restrict__ states, const u64* __restrict__ starts,
                                              float* __restrict__ snaps, const int* __restrict__ list,
                                              const int* __restrict__ slot_off, int Hk, int Hv, int Dk, int Dv,
                                              int write_out) {
    typedef DnBatchSlot<VM> Sl;
    constexpr int NB = DnBatch<VM>::N;
    const bool pipe = (write_out & 2) != 0;
    write_out &= 1;
    __shared__ __align__(16) float ring[2][NB * Sl::FLOATS];
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
    const int batches = (e_end - e0 + NB - 1) / NB;
    // Batch c's rows sit in rows[c & 1] from the turn before its copies go out: batch c + 1's are copied beside
    // batch c's inputs (batch 0's copies read the list itself).
    __shared__ int rows[2][NB];
    auto count = [&](int c) { return min(NB, e_end - (e0 + c * NB)); };
    if (batches > 0) dn_issue_batch<VM>(ring[0], e0, count(0), list + 3 * e0, 3, list, x, bg, ag, kh, h, j0, KT, C, Hv, Dk, Dv);
    if (batches > 1) dn_issue_rows(rows[1], list, e0 + NB, count(1));
    cp_async_commit();
    for (int bi = 0; bi < batches; ++bi) {
        cp_async_wait<0>();  // batch bi's inputs and batch bi + 1's rows have landed for this thread ...
        __syncthreads();     // ... and for all
        if (bi + 1 < batches) {
            const int c = bi + 1;
            dn_issue_batch<VM>(ring[c & 1], e0 + c * NB, count(c), rows[c & 1], 1, list, x, bg, ag, kh, h, j0, KT, C,
                               Hv, Dk, Dv);
            if (c + 1 < batches) dn_issue_rows(rows[(c + 1) & 1], list, e0 + (c + 1) * NB, count(c + 1));
        }
        cp_async_commit();
        float* slots = ring[bi & 1];
        const int n = count(bi);
        dn_prepare_batch<VM>(slots, n, q_scale, neg_a, dtb);
        __syncthreads();  // the batch is prepared
        if (pipe && n > 0 && dn_batch_plain<Sl>(slots, n)) {
            if (j0 + DN_WARPS * VM <= Dv) dn_chain_batch<VM, Sl, true>(S, slots, n, b, out, Hv, Dv, write_out);
            else dn_chain_batch<VM, Sl, false>(S, slots, n, b, out, Hv, Dv, write_out);
        } else {
            for (int u = 0; u < n; ++u)
                dn_step_staged<VM, Sl>(S, slots + u * Sl::FLOATS, b, starts, snaps, out, Hv, Dk, Dv, write_out);
        }
        __syncthreads();  // every warp is done with the batch before its slots take batch bi + 2
    }
    cp_async_wait<0>();
    dn_store<VM>(S, st, j0, Dk, Dv);
}

// 3 blocks an SM for the split layouts (at most 80 registers): a 128-row head is 8 blocks, so the 27B shape's 48
// heads are 384 blocks, one wave of 132 SMs × 3 (left to ptxas, this kernel took 89 registers: 2 blocks an SM, two
// waves).
DN_RECUR_BOUNDS(dn_recur_batch_v, dn_recur_batch, 1, (DN_WARPS * 32, 3))
DN_RECUR_BOUNDS(dn_recur_batch_v, dn_recur_batch, 2, (DN_WARPS * 32, 3))
DN_RECUR(dn_recur_batch_v, dn_recur_batch, 16)
