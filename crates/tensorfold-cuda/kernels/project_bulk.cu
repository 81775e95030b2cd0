// project_bulk.cu: the MLX 4-bit decode projection of project_stream.cu with its weights brought by the copy
// engine: per round, one thread asks for the next groups of all the block's warps in three bulk copies (TMA,
// cp.async.bulk), completed on an mbarrier, D − 1 rounds ahead of the one the warps compute.
//
// Why: project_stream.cu has every lane copy 16 bytes per group with cp.async, 3 groups ahead per warp. The
// lm head, a launch of 15,520 blocks with no ramp or tail to speak of, streamed at 3.1 TB/s against 4.2 of device
// copy (call 52), so a decode launch's bytes in flight, not its length, held it back. A bulk copy costs the block
// one instruction per 4 KB instead of a warp instruction per 512 bytes and no registers, so a block can keep
// 7 rounds (about 32 KB at 8 warps) in flight, and the block's warps read one contiguous run of codes per round.
//
// Arithmetic: exactly project_stream_a4's with one tile a block (MT = 1): each warp takes the same groups in the
// same order through the same a4_group, and finish_tiles adds the warps in order. So the bits are the same, and the
// row invariance argued in project_mma.cu carries over unchanged. Only where the weight bytes wait differs.
//
// Block: nw consumer warps (the matrix's decode warps) and one producer warp, the last. Dynamic shared memory (the
// host mirrors it: project.rs bulk_smem): BULK_BARS bytes of mbarriers, then `stages` stages of one round each: the
// nw warps' codes (warp w's group at w·TB), their scales (16 raw values a warp), their biases.

#define BULK_BARS 256  // bytes before the stages: 16 full and 16 empty mbarriers of 8 bytes

// The mbarrier and bulk-copy steps. In the emulator a copy is a memcpy done when issued, so the barriers do
// nothing there; project_bulk_a4 puts a __syncthreads between a round's issue and its first reader instead.
__device__ __forceinline__ void mbar_init(SmemAddr bar, u32 count) {
#ifndef TF_EMU
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
#endif
}

// Makes the barriers' initialisation visible to the copy engine (before any copy names them).
__device__ __forceinline__ void mbar_init_fence() {
#ifndef TF_EMU
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// The single arrival of the barrier's phase, announcing `bytes` that copies will complete on it.
__device__ __forceinline__ void mbar_expect(SmemAddr bar, u32 bytes) {
#ifndef TF_EMU
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// Waits until the barrier's phase of this parity has completed (its bytes have landed).
__device__ __forceinline__ void mbar_wait(SmemAddr bar, u32 parity) {
#ifndef TF_EMU
    u32 done;
    do {
        asm volatile(
            "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
#endif
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) global → shared, completing on `bar`.
__device__ __forceinline__ void bulk_copy(SmemAddr dst, const void* src, u32 bytes, SmemAddr bar) {
#ifdef TF_EMU
    memcpy(dst, src, bytes);
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
#endif
}

// Arrives once on the barrier (a consumer warp's lane 0 telling the producer it is done with a stage).
__device__ __forceinline__ void mbar_arrive(SmemAddr bar) {
#ifndef TF_EMU
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
#endif
}

// MLX 4-bit codes in groups of 32·WPL, tile-major (common.cu a4_tile_code); one tile of 16 outputs a block. The
// block's last warp is the producer: its lane 0 asks for round after round into a ring of `stages` stages, each
// stage reused once its nw consumer warps have arrived on its `empty` barrier. The nw consumer warps split the
// groups as project_mma_a4 does (warp w takes w, w + nw, …) and wait on each stage's `full` barrier.
template <int NT, int WPL, typename S>
__device__ __forceinline__ void project_bulk_a4(int tile, const u16* __restrict__ xh, const u16* __restrict__ xl,
                                                const float* __restrict__ xs, const u32* __restrict__ codes,
                                                const typename S::raw* __restrict__ scales,
                                                const typename S::raw* __restrict__ biases, float* __restrict__ y,
                                                int rows, int out, int cols, int early, int stages) {
    constexpr int TB = 256 * WPL;                          // bytes of one group's codes for one tile
    constexpr int PB = 16 * (int)sizeof(typename S::raw);  // bytes of its scales (and of its biases)
    DYNAMIC_SMEM(smem);
    const int warp = threadIdx.x >> 5, nw = (blockDim.x >> 5) - 1, lane = threadIdx.x & 31;
    const int rt0 = row_block() * NT, groups = cols / (32 * WPL);
    const int rounds = (groups + nw - 1) / nw, sb = nw * (TB + 2 * PB);
    // full[s] at 8·s, empty[s] at 128 + 8·s.
    const SmemAddr full = smem_addr(smem), empty = full + 128, ring = smem_addr(smem + BULK_BARS);
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s) {
            mbar_init(full + 8 * s, 1);
            mbar_init(empty + 8 * s, nw);
        }
        mbar_init_fence();
    }
    __syncthreads();
    float acc[1][NT][2];  // the producer's stay 0 and are not added (finish_tiles takes nw warps)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[0][nt][0] = acc[0][nt][1] = 0.0f;
    if (warp == nw) {
        // The producer reads weights only, which no kernel writes, so it never waits for the predecessor unless
        // told not to start early (`early`, as project_stream.cu).
        if (!early) kernel_entry();
        const unsigned char* codes_b = reinterpret_cast<const unsigned char*>(codes) + (size_t)tile * groups * TB;
        const unsigned char* scales_b =
            reinterpret_cast<const unsigned char*>(scales) + (size_t)tile * groups * PB;
        const unsigned char* biases_b =
            reinterpret_cast<const unsigned char*>(biases) + (size_t)tile * groups * PB;
        for (int r = 0, s = 0; r < rounds; ++r, s = s + 1 == stages ? 0 : s + 1) {
            if (lane == 0) {
                // Stage s's previous round (r − stages) has been released by every consumer.
                if (r >= stages) mbar_wait(empty + 8 * s, (u32)(r / stages - 1) & 1);
                const int n = min(nw, groups - nw * r);
                const SmemAddr st = ring + s * sb, bar = full + 8 * s;
                mbar_expect(bar, n * (TB + 2 * PB));
                bulk_copy(st, codes_b + (size_t)nw * r * TB, n * TB, bar);
                bulk_copy(st + nw * TB, scales_b + (size_t)nw * r * PB, n * PB, bar);
                bulk_copy(st + nw * (TB + PB), biases_b + (size_t)nw * r * PB, n * PB, bar);
            }
#ifdef TF_EMU
            __syncthreads();  // the emulator's copy is done; the consumers' round r may start
            __syncthreads();  // ... and has ended: the stage may be reused
#endif
        }
    } else {
        kernel_entry();  // the consumers read x: they wait for the predecessor, early or not
        const u16* xpp[NT];
        const float* xsp[NT];
        a4_x_at<NT, WPL>(xh, xl, xs, rows, cols, rt0, warp, xpp, xsp);
        const u32 mask = opaque_nibble_mask();
        int s = 0;
        u32 parity = 0;
        for (int i = 0; i < rounds; ++i) {
#ifdef TF_EMU
            __syncthreads();
#endif
            mbar_wait(full + 8 * s, parity);
            if (warp + nw * i < groups) {
                const unsigned char* st = smem + BULK_BARS + s * sb;
                a4_group<NT, WPL, S, 1>(reinterpret_cast<const u32*>(st + warp * TB),
                                        reinterpret_cast<const typename S::raw*>(st + nw * TB + warp * PB),
                                        reinterpret_cast<const typename S::raw*>(st + nw * (TB + PB) + warp * PB),
                                        0, xpp, xsp, mask, acc);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    xpp[nt] += nw * 32 * WPL;
                    xsp[nt] += nw * WPL;
                }
            }
            __syncwarp();  // every lane is done with the stage ...
            if (lane == 0) mbar_arrive(empty + 8 * s);  // ... so this warp releases it
#ifdef TF_EMU
            __syncthreads();
#endif
            if (++s == stages) {
                s = 0;
                parity ^= 1;
            }
        }
    }
    // The stages become the reduction's scratch: every consumer is done with them, and no copy is in flight (the
    // consumers waited for each).
    __syncthreads();
    finish_tiles<NT>(acc[0], y, rows, out, tile * MMA_OUT, rt0, reinterpret_cast<float*>(smem + BULK_BARS), nw);
}

// Up to four matrices of one family and column count in one launch, as project_stream.cu's STREAM_A4 takes them.
#define BULK_A4(NT, WPL, NAME, S)                                                                                 \
    extern "C" __global__ void __launch_bounds__(544, 1) project_bulk_a4_g##WPL##_##NAME##_nt##NT(                \
        const u16* xh, const u16* xl, const float* xs, A4_JOB(S, 0), A4_JOB(S, 1), int start1, A4_JOB(S, 2),      \
        int start2, A4_JOB(S, 3), int start3, int rows, int cols, int early, int stages) {                        \
        entry_after_weights();                                                                                    \
        const int j = job_of(start1, start2, start3);                                                             \
        project_bulk_a4<NT, WPL, S>(tile_block() - job_pick(j, 0, start1, start2, start3), xh, xl, xs,            \
                                    job_pick(j, codes0, codes1, codes2, codes3),                                  \
                                    job_pick(j, scales0, scales1, scales2, scales3),                              \
                                    job_pick(j, biases0, biases1, biases2, biases3), job_pick(j, y0, y1, y2, y3), \
                                    rows, job_pick(j, out0, out1, out2, out3), cols, early, stages);              \
    }
#define BULK_A4_NT(WPL, NAME, S) BULK_A4(1, WPL, NAME, S) BULK_A4(2, WPL, NAME, S) BULK_A4(4, WPL, NAME, S)
#define BULK_A4_ALL(WPL) BULK_A4_NT(WPL, f32, F32T) BULK_A4_NT(WPL, f16, F16T) BULK_A4_NT(WPL, bf16, BF16T)
BULK_A4_ALL(1)
BULK_A4_ALL(2)
BULK_A4_ALL(4)
