//! AVX-512F+BW affine (MLX) kernels with one arithmetic per output, whatever the batch: code vector t (16 codes
//! in load order, x permuted to match) gives w_t = fl(s_g·q_t), acc[t % 2] = fma(w_t, x_t, acc[t % 2]), and
//! y = hsum(acc0 + acc1) + (biases · xsum). Single rows compute w_t in registers; batches dequantize a block of
//! weight rows once into f32 and run the dense kernel over it, which performs exactly the same operations.
#![allow(clippy::needless_range_loop)]

use super::avx512::{dense_dots_f32, dense_rows_f32, hsum};
use super::Block;
use std::arch::x86_64::*;

/// Batches of at least this many x rows take the dequantize-then-dense path.
const BATCH: usize = 4;
/// Weight rows processed together on the single-row path (independent accumulator chains).
const ROWS: usize = 2;
/// How far ahead of its reads the single-row path prefetches a row's codes.
const PREFETCH_BYTES: usize = 4096;
/// f32 bytes of one dequantized block (kept in L2 while every x row sweeps it).
const DEQ_BYTES: usize = 384 * 1024;

thread_local! {
    /// Dequantized weight blocks, reused across calls.
    static DEQ: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Whether the byte kernels (x permuted by `permute_bytes(bits, 16)`) take this format; the shuffle kernels
/// (x in natural order) take every other one.
pub(super) fn uses_bytes(bits: u32, gs: usize) -> bool {
    (matches!(bits, 4 | 8) && gs.is_multiple_of(32)) || (bits == 2 && gs.is_multiple_of(64))
}

/// Per-call constants: the byte shuffle and shifts that spread a 16-code block over 16 lanes, the code mask,
/// and the code values e mod 2^bits of table lanes e = 0..16 and 16..32.
struct Consts {
    sidx: __m512i,
    shifts: __m512i,
    mask: __m512i,
    iota_lo: __m512,
    iota_hi: __m512,
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn consts(bits: usize) -> Consts {
    let mut sidx = [0x80u8; 64];
    let mut shifts = [0i32; 16];
    let (mut lo, mut hi) = ([0f32; 16], [0f32; 16]);
    for l in 0..16 {
        let b0 = l * bits / 8;
        sidx[4 * l] = b0 as u8;
        if b0 < 15 {
            sidx[4 * l + 1] = (b0 + 1) as u8;
        }
        shifts[l] = (l * bits % 8) as i32;
        lo[l] = (l % (1 << bits)) as f32;
        hi[l] = ((l + 16) % (1 << bits)) as f32;
    }
    Consts {
        sidx: _mm512_loadu_si512(sidx.as_ptr().cast()),
        shifts: _mm512_loadu_si512(shifts.as_ptr().cast()),
        mask: _mm512_set1_epi32((1 << bits) - 1),
        iota_lo: _mm512_loadu_ps(lo.as_ptr()),
        iota_hi: _mm512_loadu_ps(hi.as_ptr()),
    }
}

/// One group's dequantization: table lanes fl(s·(e mod 2^bits)) for e in 0..16 and 16..32, and s itself.
#[derive(Clone, Copy)]
struct Tab {
    lo: __m512,
    hi: __m512,
    s: __m512,
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn tab<const B: u32>(k: &Consts, s: f32) -> Tab {
    let s = _mm512_set1_ps(s);
    let lo = if B <= 5 {
        _mm512_mul_ps(s, k.iota_lo)
    } else {
        s
    };
    let hi = if B == 5 {
        _mm512_mul_ps(s, k.iota_hi)
    } else {
        lo
    };
    Tab { lo, hi, s }
}

/// Codes of the 16-code block at `p` (natural order), each in its lane's low bits with the following code's
/// bits above.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn spread(k: &Consts, p: *const u8) -> __m512i {
    let v = _mm512_broadcast_i32x4(_mm_loadu_si128(p.cast()));
    _mm512_srlv_epi32(_mm512_shuffle_epi8(v, k.sidx), k.shifts)
}

/// fl(s·q) for codes in the low B bits of each lane of `raw` (B ≤ 5: table lookup; higher lane bits ignored).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn scaled<const B: u32>(k: &Consts, raw: __m512i, t: Tab) -> __m512 {
    match B {
        5 => _mm512_permutex2var_ps(t.lo, raw, t.hi),
        2..=4 => _mm512_permutexvar_ps(raw, t.lo),
        _ => _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(raw, k.mask)), t.s),
    }
}

/// The NV (4, or 2 at a row's end) weight vectors fl(s·q) of the codes from element `e` on: vectors 0, 1 use
/// table `ta`, vectors 2, 3 use `tb` (the group holding element e + 32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn wvecs<const B: u32, const SHUF: bool, const NV: usize>(
    k: &Consts,
    codes: *const u8,
    (ta, tb): (Tab, Tab),
    e: usize,
) -> [__m512; NV] {
    let mut w = [_mm512_setzero_ps(); NV];
    if SHUF {
        for v in 0..NV {
            let raw = spread(k, codes.add((e / 8 + 2 * v) * B as usize));
            w[v] = scaled::<B>(k, raw, if v < 2 { ta } else { tb });
        }
    } else if B == 8 {
        for v in 0..NV {
            let raw = _mm512_cvtepu8_epi32(_mm_loadu_si128(codes.add(e + 16 * v).cast()));
            w[v] = scaled::<8>(k, raw, if v < 2 { ta } else { tb });
        }
    } else if B == 4 {
        for h in 0..NV / 2 {
            let raw = _mm512_cvtepu8_epi32(_mm_loadu_si128(codes.add((e + 32 * h) / 2).cast()));
            let t = if h == 0 { ta } else { tb };
            w[2 * h] = scaled::<4>(k, raw, t);
            w[2 * h + 1] = scaled::<4>(k, _mm512_srli_epi32::<4>(raw), t);
        }
    } else {
        // 2-bit bytes: one 16-byte load holds 64 codes of one group (uses_bytes asks gs % 64 == 0).
        debug_assert!(NV == 4);
        let raw = _mm512_cvtepu8_epi32(_mm_loadu_si128(codes.add(e / 4).cast()));
        for v in 0..NV {
            w[v] = scaled::<2>(
                k,
                _mm512_srlv_epi32(raw, _mm512_set1_epi32(2 * v as i32)),
                ta,
            );
        }
    }
    w
}

/// Tables for the step at element `e` (groups of 2^gs_log2 codes), reusing `cur` while the group is unchanged.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn step_tabs<const B: u32>(
    k: &Consts,
    scales: &[f32],
    gs_log2: u32,
    e: usize,
    cur: &mut (usize, Tab),
) -> (Tab, Tab) {
    let (ga, gb) = (e >> gs_log2, (e + 32) >> gs_log2);
    if ga != cur.0 {
        *cur = (ga, tab::<B>(k, scales[ga]));
    }
    let ta = cur.1;
    if gb != ga && gb < scales.len() {
        *cur = (gb, tab::<B>(k, scales[gb]));
    }
    (ta, cur.1)
}

/// Single x row against R weight rows: per row, acc[t % 2] = fma(w_t, x_t, acc[t % 2]); returns acc0 + acc1.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn row_dots<const B: u32, const SHUF: bool, const R: usize>(
    k: &Consts,
    codes: [*const u8; R],
    scales: [&[f32]; R],
    gs_log2: u32,
    x: *const f32,
    cols: usize,
) -> [__m512; R] {
    let mut a0 = [_mm512_setzero_ps(); R];
    let mut a1 = [_mm512_setzero_ps(); R];
    let first = tab::<B>(k, scales[0][0]);
    let mut cur = [(0usize, first); R];
    for r in 1..R {
        cur[r].1 = tab::<B>(k, scales[r][0]);
    }
    let mut e = 0;
    while e + 64 <= cols {
        let xv = [0, 1, 2, 3].map(|v| _mm512_loadu_ps(x.add(e + 16 * v)));
        for r in 0..R {
            // Hardware prefetch alone leaves this stream latency-bound when it comes from DRAM.
            let ahead = codes[r].wrapping_add(e * B as usize / 8 + PREFETCH_BYTES);
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
            let tabs = step_tabs::<B>(k, scales[r], gs_log2, e, &mut cur[r]);
            let w = wvecs::<B, SHUF, 4>(k, codes[r], tabs, e);
            a0[r] = _mm512_fmadd_ps(w[0], xv[0], a0[r]);
            a1[r] = _mm512_fmadd_ps(w[1], xv[1], a1[r]);
            a0[r] = _mm512_fmadd_ps(w[2], xv[2], a0[r]);
            a1[r] = _mm512_fmadd_ps(w[3], xv[3], a1[r]);
        }
        e += 64;
    }
    if e < cols {
        for r in 0..R {
            let tabs = step_tabs::<B>(k, scales[r], gs_log2, e, &mut cur[r]);
            let w = wvecs::<B, SHUF, 2>(k, codes[r], tabs, e);
            a0[r] = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(x.add(e)), a0[r]);
            a1[r] = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(x.add(e + 16)), a1[r]);
        }
    }
    let mut out = [_mm512_setzero_ps(); R];
    for r in 0..R {
        out[r] = _mm512_add_ps(a0[r], a1[r]);
    }
    out
}

/// Writes the row's weight vectors fl(s·q) in load order to `out` (`cols` f32).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dequant_row<const B: u32, const SHUF: bool>(
    k: &Consts,
    codes: *const u8,
    scales: &[f32],
    gs_log2: u32,
    cols: usize,
    out: *mut f32,
) {
    let mut cur = (0usize, tab::<B>(k, scales[0]));
    let mut e = 0;
    while e + 64 <= cols {
        let tabs = step_tabs::<B>(k, scales, gs_log2, e, &mut cur);
        let w = wvecs::<B, SHUF, 4>(k, codes, tabs, e);
        for v in 0..4 {
            _mm512_storeu_ps(out.add(e + 16 * v), w[v]);
        }
        e += 64;
    }
    if e < cols {
        let tabs = step_tabs::<B>(k, scales, gs_log2, e, &mut cur);
        let w = wvecs::<B, SHUF, 2>(k, codes, tabs, e);
        _mm512_storeu_ps(out.add(e), w[0]);
        _mm512_storeu_ps(out.add(e + 16), w[1]);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn affine_block_b<const B: u32, const SHUF: bool>(
    gs: usize,
    b: &Block<'_>,
    out: &mut [f32],
    stride: usize,
) {
    let (cols, nr, n_o) = (b.cols, b.nr, b.n_o);
    let (ng, rb, gs_log2) = (cols / gs, cols * B as usize / 8, gs.trailing_zeros());
    let k = consts(B as usize);
    // Row i's codes; the shuffle kernels' 16-byte loads may run past the last row, which then reads a padded copy.
    let mut padded = Vec::new();
    let mut row_codes = |i: usize| -> *const u8 {
        let row = &b.w[i * rb..];
        if SHUF && row.len() < rb + 16 {
            padded.resize(rb + 16, 0u8);
            padded[..rb].copy_from_slice(&row[..rb]);
            padded.as_ptr()
        } else {
            row.as_ptr()
        }
    };
    let scales = |i: usize| &b.scales[i * ng..(i + 1) * ng];
    let biases = |i: usize| b.biases[i * ng..(i + 1) * ng].as_ptr();
    if nr >= BATCH {
        // Whole groups of the dense kernel's three weight rows, so no row takes its slower one-row path.
        let sub = (DEQ_BYTES / (cols * 4) / 3 * 3).max(3);
        // A per-thread buffer, taken (not borrowed) so a nested call on this thread simply allocates its own.
        let mut deq = DEQ.take();
        deq.resize(sub.min(n_o) * cols, 0.0);
        for i0 in (0..n_o).step_by(sub) {
            let n = sub.min(n_o - i0);
            for i in 0..n {
                let cp = row_codes(i0 + i);
                dequant_row::<B, SHUF>(
                    &k,
                    cp,
                    scales(i0 + i),
                    gs_log2,
                    cols,
                    deq.as_mut_ptr().add(i * cols),
                );
            }
            dense_rows_f32(
                deq.as_ptr(),
                n,
                b.xs.as_ptr(),
                nr,
                cols,
                &mut out[i0..],
                stride,
            );
            for i in i0..i0 + n {
                let mut r0 = 0;
                while r0 < nr {
                    let xsum = b.xsum.as_ptr().add(r0 * ng);
                    if r0 + BATCH <= nr {
                        let bd = dense_dots_f32::<BATCH>(biases(i), xsum, ng);
                        for j in 0..BATCH {
                            out[(r0 + j) * stride + i] += bd[j];
                        }
                        r0 += BATCH;
                    } else {
                        out[r0 * stride + i] += dense_dots_f32::<1>(biases(i), xsum, ng)[0];
                        r0 += 1;
                    }
                }
            }
        }
        DEQ.set(deq);
        return;
    }
    for j in 0..nr {
        let (x, xsum) = (b.xs.as_ptr().add(j * cols), b.xsum.as_ptr().add(j * ng));
        let mut i = 0;
        while i < n_o {
            // Rows sharing a call read their own bytes; any row needing the padded copy goes alone.
            if i + ROWS <= n_o && !(SHUF && b.w.len() < (i + ROWS) * rb + 16) {
                let cps: [*const u8; ROWS] = std::array::from_fn(|r| b.w[(i + r) * rb..].as_ptr());
                let sc: [&[f32]; ROWS] = std::array::from_fn(|r| scales(i + r));
                let acc = row_dots::<B, SHUF, ROWS>(&k, cps, sc, gs_log2, x, cols);
                for r in 0..ROWS {
                    out[j * stride + i + r] =
                        hsum(acc[r]) + dense_dots_f32::<1>(biases(i + r), xsum, ng)[0];
                }
                i += ROWS;
            } else {
                let acc = row_dots::<B, SHUF, 1>(&k, [row_codes(i)], [scales(i)], gs_log2, x, cols);
                out[j * stride + i] = hsum(acc[0]) + dense_dots_f32::<1>(biases(i), xsum, ng)[0];
                i += 1;
            }
        }
    }
}

/// Affine out[j·stride + i] = y(x row j, weight row i) for the block. `b.w` runs from the block's first code
/// row to the end of the matrix's codes; `b.xs` is permuted when `uses_bytes`.
/// Caller: avx512f, avx512bw, avx2, fma and f16c are available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub(super) unsafe fn affine_block(
    bits: u32,
    gs: usize,
    b: &Block<'_>,
    out: &mut [f32],
    stride: usize,
) {
    assert!(matches!(gs, 32 | 64 | 128) && b.cols.is_multiple_of(gs));
    b.check(
        b.n_o * b.cols * bits as usize / 8,
        b.cols / gs,
        out.len(),
        stride,
    );
    match (bits, uses_bytes(bits, gs)) {
        (2, true) => affine_block_b::<2, false>(gs, b, out, stride),
        (2, false) => affine_block_b::<2, true>(gs, b, out, stride),
        (3, _) => affine_block_b::<3, true>(gs, b, out, stride),
        (4, _) => affine_block_b::<4, false>(gs, b, out, stride),
        (5, _) => affine_block_b::<5, true>(gs, b, out, stride),
        (6, _) => affine_block_b::<6, true>(gs, b, out, stride),
        (8, _) => affine_block_b::<8, false>(gs, b, out, stride),
        (b, _) => unreachable!("no {b}-bit affine kernel"),
    }
}
