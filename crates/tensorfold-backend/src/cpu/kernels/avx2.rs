//! AVX2+FMA+F16C dense and affine kernels: 8-lane vectors, a fixed accumulator pattern per output and one fixed
//! horizontal sum, so an output's bits depend only on its weight row and its x row, never on the tile.
#![allow(clippy::needless_range_loop)]

use super::Block;
use std::arch::x86_64::*;
use tensorfold_core::DenseDType;

/// Rows of x in a dense tile: WROWS·DENSE_TILE·2 accumulators stay in registers.
const DENSE_TILE: usize = 3;
/// Weight rows a dense tile loads together (each x load then feeds WROWS products).
const WROWS: usize = 2;
/// Rows of x in an affine tile, against one weight row.
const AFFINE_TILE: usize = 4;
/// How far ahead of its reads an affine kernel prefetches a row's codes.
const PREFETCH_BYTES: usize = 4096;

const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

fn dt_code(d: DenseDType) -> u8 {
    match d {
        DenseDType::F32 => F32,
        DenseDType::F16 => F16,
        DenseDType::BF16 => BF16,
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const DT: u8>(p: *const u8) -> __m256 {
    match DT {
        F32 => _mm256_loadu_ps(p.cast()),
        F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
        _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
            _mm_loadu_si128(p.cast()),
        ))),
    }
}

/// Lane masks for a partial 16-column step of `rem` columns: windows at 16 - rem and 24 - rem.
static TAIL_MASK: [i32; 32] = {
    let mut m = [0i32; 32];
    let mut i = 0;
    while i < 16 {
        m[i] = -1;
        i += 1;
    }
    m
};

/// One element, converted exactly as `load8` does.
#[inline]
unsafe fn load1<const DT: u8>(p: *const u8) -> f32 {
    match DT {
        F32 => f32::from_bits(u32::from_le(p.cast::<u32>().read_unaligned())),
        F16 => half::f16::from_bits(u16::from_le(p.cast::<u16>().read_unaligned())).to_f32(),
        _ => f32::from_bits((u16::from_le(p.cast::<u16>().read_unaligned()) as u32) << 16),
    }
}

/// Fixed horizontal sum: (lo128 + hi128), then lanes (0+2, 1+3), then (0 + 1).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Dot products of R weight rows (stride `rb` bytes) with T x rows (stride `cols`). For every pair, columns
/// [c, c+8) of each 16-column step go to acc0 and [c+8, c+16) to acc1, a final partial step reads masked
/// (zeroed) lanes, and the result is hsum(acc0 + acc1): the same arithmetic whatever R and T are.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dense_grid<const DT: u8, const R: usize, const T: usize>(
    w: *const u8,
    rb: usize,
    xs: *const f32,
    cols: usize,
) -> [[f32; T]; R] {
    let sz = if DT == F32 { 4 } else { 2 };
    let mut a0 = [[_mm256_setzero_ps(); T]; R];
    let mut a1 = [[_mm256_setzero_ps(); T]; R];
    let full = cols - cols % 16;
    let mut c = 0;
    while c < full {
        let mut wv = [_mm256_setzero_ps(); R];
        for r in 0..R {
            wv[r] = load8::<DT>(w.add(r * rb + c * sz));
        }
        for t in 0..T {
            let x = _mm256_loadu_ps(xs.add(t * cols + c));
            for r in 0..R {
                a0[r][t] = _mm256_fmadd_ps(wv[r], x, a0[r][t]);
            }
        }
        for r in 0..R {
            wv[r] = load8::<DT>(w.add(r * rb + (c + 8) * sz));
        }
        for t in 0..T {
            let x = _mm256_loadu_ps(xs.add(t * cols + c + 8));
            for r in 0..R {
                a1[r][t] = _mm256_fmadd_ps(wv[r], x, a1[r][t]);
            }
        }
        c += 16;
    }
    if c < cols {
        // Masked-off lanes read as zero: the same as a zero-padded step, without touching memory past the end.
        let rem = cols - c;
        let m0 = _mm256_loadu_si256(TAIL_MASK.as_ptr().add(16 - rem).cast());
        let m1 = _mm256_loadu_si256(TAIL_MASK.as_ptr().add(24 - rem).cast());
        for r in 0..R {
            let (w0, w1) = if DT == F32 {
                let p = w.add(r * rb + c * sz).cast::<f32>();
                (_mm256_maskload_ps(p, m0), _mm256_maskload_ps(p.add(8), m1))
            } else {
                let mut wb = [0f32; 16];
                for (i, v) in wb[..rem].iter_mut().enumerate() {
                    *v = load1::<DT>(w.add(r * rb + (c + i) * sz));
                }
                (
                    _mm256_loadu_ps(wb.as_ptr()),
                    _mm256_loadu_ps(wb.as_ptr().add(8)),
                )
            };
            for t in 0..T {
                let x = xs.add(t * cols + c);
                a0[r][t] = _mm256_fmadd_ps(w0, _mm256_maskload_ps(x, m0), a0[r][t]);
                a1[r][t] = _mm256_fmadd_ps(w1, _mm256_maskload_ps(x.add(8), m1), a1[r][t]);
            }
        }
    }
    let mut out = [[0f32; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = hsum(_mm256_add_ps(a0[r][t], a1[r][t]));
        }
    }
    out
}

/// One weight row against N x rows (see `dense_grid`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dense_dots<const DT: u8, const N: usize>(
    w: *const u8,
    xs: *const f32,
    cols: usize,
) -> [f32; N] {
    dense_grid::<DT, 1, N>(w, 0, xs, cols)[0]
}

/// Σ a[i]·b[i] in the dense order above. Caller: avx2, fma and f16c are available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    dense_dots::<F32, 1>(a.as_ptr().cast(), b.as_ptr(), a.len())[0]
}

/// out[i] = q · key i for `n` keys `stride` floats apart (attention scores over a KV page): the keys are the
/// weight rows of `dense_rows`, so each score has exactly the arithmetic of `dot(q, key)` (the products commute
/// bit for bit), with q's loads and the call shared. Caller: the features enabled here are available; `keys`
/// holds n − 1 strides plus q.len() floats.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dots_strided(
    q: &[f32],
    keys: *const f32,
    stride: usize,
    n: usize,
    out: &mut [f32],
) {
    assert!(
        out.len() >= n,
        "dots_strided: {} outputs for {n} keys",
        out.len()
    );
    dense_rows::<F32>(keys.cast(), stride * 4, n, q.as_ptr(), 1, q.len(), out, n);
}

/// For each value row i in order, y = fma(alphas[i], row i, y) (rows `stride` floats apart): the arithmetic of
/// one `axpy` per row, with y kept in registers across the rows. Caller: the features enabled here are available;
/// `values` holds alphas.len() − 1 strides plus y.len() floats.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn axpys_strided(
    alphas: &[f32],
    values: *const f32,
    stride: usize,
    y: &mut [f32],
) {
    let n = y.len();
    let mut c = 0;
    while c + 8 <= n {
        let p = y.as_mut_ptr().add(c);
        let mut acc = _mm256_loadu_ps(p);
        for (i, &a) in alphas.iter().enumerate() {
            acc = _mm256_fmadd_ps(
                _mm256_set1_ps(a),
                _mm256_loadu_ps(values.add(i * stride + c)),
                acc,
            );
        }
        _mm256_storeu_ps(p, acc);
        c += 8;
    }
    for k in c..n {
        for (i, &a) in alphas.iter().enumerate() {
            y[k] = a.mul_add(*values.add(i * stride + k), y[k]);
        }
    }
}

/// y[i] = fma(alpha, x[i], y[i]). Caller: avx2 and fma are available.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: lengths differ");
    let n = x.len();
    let a = _mm256_set1_ps(alpha);
    let mut i = 0;
    while i + 8 <= n {
        let p = y.as_mut_ptr().add(i);
        _mm256_storeu_ps(
            p,
            _mm256_fmadd_ps(a, _mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(p)),
        );
        i += 8;
    }
    for k in i..n {
        y[k] = alpha.mul_add(x[k], y[k]);
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn convert_dt<const DT: u8>(p: *const u8, out: &mut [f32]) {
    let sz = if DT == F32 { 4 } else { 2 };
    let n = out.len();
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(out.as_mut_ptr().add(i), load8::<DT>(p.add(i * sz)));
        i += 8;
    }
    for k in i..n {
        out[k] = load1::<DT>(p.add(k * sz));
    }
}

/// Exact conversion of `out.len()` elements. Caller: avx2, fma and f16c are available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn convert(dtype: DenseDType, bytes: &[u8], out: &mut [f32]) {
    assert!(
        bytes.len() >= out.len() * dtype.size(),
        "convert: short input"
    );
    match dt_code(dtype) {
        F32 => convert_dt::<F32>(bytes.as_ptr(), out),
        F16 => convert_dt::<F16>(bytes.as_ptr(), out),
        _ => convert_dt::<BF16>(bytes.as_ptr(), out),
    }
}

/// out[j·stride + i] = W row i · x row j for i < n_o, j < nr: tiles of DENSE_TILE x rows, each against groups
/// of WROWS weight rows (rows of `rb` bytes from `w`); leftovers run with smaller tiles of the same arithmetic.
#[allow(clippy::too_many_arguments)]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dense_rows<const DT: u8>(
    w: *const u8,
    rb: usize,
    n_o: usize,
    xs: *const f32,
    nr: usize,
    cols: usize,
    out: &mut [f32],
    stride: usize,
) {
    // Whole tiles, then one tile of the 1–3 rows left (a small window's rows share their weight loads too); the
    // tile never changes an output's arithmetic.
    let mut r0 = 0;
    while r0 < nr {
        let t = (nr - r0).min(DENSE_TILE);
        let x = xs.add(r0 * cols);
        if t == DENSE_TILE {
            dense_tile::<DT, DENSE_TILE>(w, rb, n_o, x, cols, out, stride, r0);
        } else if t == 3 {
            dense_tile::<DT, 3>(w, rb, n_o, x, cols, out, stride, r0);
        } else if t == 2 {
            dense_tile::<DT, 2>(w, rb, n_o, x, cols, out, stride, r0);
        } else {
            dense_tile::<DT, 1>(w, rb, n_o, x, cols, out, stride, r0);
        }
        r0 += t;
    }
}

/// T x rows (starting at x row r0) against all n_o weight rows, WROWS at a time.
#[inline]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dense_tile<const DT: u8, const T: usize>(
    w: *const u8,
    rb: usize,
    n_o: usize,
    x: *const f32,
    cols: usize,
    out: &mut [f32],
    stride: usize,
    r0: usize,
) {
    let mut i = 0;
    while i < n_o {
        let wi = w.add(i * rb);
        if i + WROWS <= n_o {
            let v = dense_grid::<DT, WROWS, T>(wi, rb, x, cols);
            for r in 0..WROWS {
                for t in 0..T {
                    out[(r0 + t) * stride + i + r] = v[r][t];
                }
            }
            i += WROWS;
        } else {
            let v = dense_dots::<DT, T>(wi, x, cols);
            for t in 0..T {
                out[(r0 + t) * stride + i] = v[t];
            }
            i += 1;
        }
    }
}

/// out[j·stride + i] = W row i · x row j for the block's rows. Caller: the features enabled here are available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dense_block(dtype: DenseDType, b: &Block<'_>, out: &mut [f32], stride: usize) {
    let rb = b.cols * dtype.size();
    b.check(b.n_o * rb, 0, out.len(), stride);
    let (w, xs) = (b.w.as_ptr(), b.xs.as_ptr());
    match dt_code(dtype) {
        F32 => dense_rows::<F32>(w, rb, b.n_o, xs, b.nr, b.cols, out, stride),
        F16 => dense_rows::<F16>(w, rb, b.n_o, xs, b.nr, b.cols, out, stride),
        _ => dense_rows::<BF16>(w, rb, b.n_o, xs, b.nr, b.cols, out, stride),
    }
}

/// Affine group dots for bits 2, 4, 8 from 8-byte loads widened to 8 u32 lanes: after shift k, lane i holds
/// code i·(8/B) + k of the chunk, so `xs` must be permuted by `permute_bytes(bits, 8)`. Within a group, code
/// vector t accumulates into g[t % 2]; after each group acc = fma(s_g, g0 + g1, acc).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bytes_acc<const B: i32, const N: usize>(
    codes: *const u8,
    scales: &[f32],
    gs: usize,
    xs: *const f32,
    cols: usize,
) -> [__m256; N] {
    let per_byte = (8 / B) as usize;
    let mask = _mm256_set1_epi32((1 << B) - 1);
    let mut acc = [_mm256_setzero_ps(); N];
    for (g, &s) in scales.iter().enumerate() {
        let mut g0 = [_mm256_setzero_ps(); N];
        let mut g1 = [_mm256_setzero_ps(); N];
        let end = (g + 1) * gs;
        let mut e = g * gs;
        while e < end {
            // Hardware prefetch alone leaves the code stream latency-bound when it comes from DRAM.
            _mm_prefetch::<_MM_HINT_T0>(
                codes
                    .wrapping_add(e * B as usize / 8 + PREFETCH_BYTES)
                    .cast(),
            );
            if B == 8 {
                let q0 =
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(codes.add(e).cast())));
                let q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                    codes.add(e + 8).cast(),
                )));
                for j in 0..N {
                    let x = xs.add(j * cols + e);
                    g0[j] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(x), g0[j]);
                    g1[j] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x.add(8)), g1[j]);
                }
                e += 16;
            } else {
                let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(codes.add(e * B as usize / 8).cast()));
                for k in 0..per_byte {
                    let sh = _mm256_srlv_epi32(v, _mm256_set1_epi32(B * k as i32));
                    let q = if (k + 1) * B as usize == 8 {
                        sh
                    } else {
                        _mm256_and_si256(sh, mask)
                    };
                    let q = _mm256_cvtepi32_ps(q);
                    for j in 0..N {
                        let x = _mm256_loadu_ps(xs.add(j * cols + e + 8 * k));
                        if k.is_multiple_of(2) {
                            g0[j] = _mm256_fmadd_ps(q, x, g0[j]);
                        } else {
                            g1[j] = _mm256_fmadd_ps(q, x, g1[j]);
                        }
                    }
                }
                e += 8 * per_byte;
            }
        }
        let sv = _mm256_set1_ps(s);
        for j in 0..N {
            acc[j] = _mm256_fmadd_ps(sv, _mm256_add_ps(g0[j], g1[j]), acc[j]);
        }
    }
    acc
}

/// Affine group dots for any width 2..=8 in natural order: each 8-code block (`bits` bytes) is read with one
/// 16-byte load (the caller guarantees 16 readable bytes), spread by a byte shuffle, shifted and masked. Block
/// t of a group accumulates into g[t % 2]; after each group acc = fma(s_g, g0 + g1, acc).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn shuffle_acc<const N: usize>(
    bits: usize,
    codes: *const u8,
    scales: &[f32],
    gs: usize,
    xs: *const f32,
    cols: usize,
) -> [__m256; N] {
    let mut idx = [0x80u8; 32];
    let mut shifts = [0i32; 8];
    for l in 0..8 {
        let b0 = l * bits / 8;
        idx[4 * l] = b0 as u8;
        idx[4 * l + 1] = (b0 + 1) as u8;
        shifts[l] = (l * bits % 8) as i32;
    }
    let idx = _mm256_loadu_si256(idx.as_ptr().cast());
    let shv = _mm256_loadu_si256(shifts.as_ptr().cast());
    let mask = _mm256_set1_epi32((1 << bits) - 1);
    let mut acc = [_mm256_setzero_ps(); N];
    for (g, &s) in scales.iter().enumerate() {
        let mut g0 = [_mm256_setzero_ps(); N];
        let mut g1 = [_mm256_setzero_ps(); N];
        let end = (g + 1) * gs;
        let mut e = g * gs;
        while e < end {
            _mm_prefetch::<_MM_HINT_T0>(codes.wrapping_add(e / 8 * bits + PREFETCH_BYTES).cast());
            let v0 = _mm256_broadcastsi128_si256(_mm_loadu_si128(codes.add(e / 8 * bits).cast()));
            let v1 =
                _mm256_broadcastsi128_si256(_mm_loadu_si128(codes.add((e / 8 + 1) * bits).cast()));
            let q0 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v0, idx), shv), mask);
            let q1 = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(v1, idx), shv), mask);
            let q0 = _mm256_cvtepi32_ps(q0);
            let q1 = _mm256_cvtepi32_ps(q1);
            for j in 0..N {
                let x = xs.add(j * cols + e);
                g0[j] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(x), g0[j]);
                g1[j] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(x.add(8)), g1[j]);
            }
            e += 16;
        }
        let sv = _mm256_set1_ps(s);
        for j in 0..N {
            acc[j] = _mm256_fmadd_ps(sv, _mm256_add_ps(g0[j], g1[j]), acc[j]);
        }
    }
    acc
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn affine_acc<const N: usize>(
    shuffle: bool,
    bits: u32,
    codes: *const u8,
    scales: &[f32],
    gs: usize,
    xs: *const f32,
    cols: usize,
) -> [__m256; N] {
    match (shuffle, bits) {
        (false, 2) => bytes_acc::<2, N>(codes, scales, gs, xs, cols),
        (false, 4) => bytes_acc::<4, N>(codes, scales, gs, xs, cols),
        (false, 8) => bytes_acc::<8, N>(codes, scales, gs, xs, cols),
        (true, b) => shuffle_acc::<N>(b as usize, codes, scales, gs, xs, cols),
        (false, b) => unreachable!("avx2 byte kernel has no {b}-bit form"),
    }
}

/// Affine out[j·stride + i] = hsum(acc) + (biases_i · xsum_j) for the block's rows. `b.w` runs from the
/// block's first code row to the end of the matrix's codes; `b.xs` is permuted unless `shuffle` (see
/// `bytes_acc`). Caller: avx2, fma and f16c are available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn affine_block(
    shuffle: bool,
    bits: u32,
    gs: usize,
    b: &Block<'_>,
    out: &mut [f32],
    stride: usize,
) {
    let (cols, nr) = (b.cols, b.nr);
    let ng = cols / gs;
    let rb = cols * bits as usize / 8;
    assert!(gs.is_multiple_of(16) && cols.is_multiple_of(gs));
    b.check(b.n_o * rb, ng, out.len(), stride);
    let mut padded = Vec::new();
    let mut r0 = 0;
    while r0 < nr {
        let full = r0 + AFFINE_TILE <= nr;
        let (xs, xsum) = (b.xs.as_ptr().add(r0 * cols), b.xsum.as_ptr().add(r0 * ng));
        for i in 0..b.n_o {
            let row = &b.w[i * rb..];
            let cp = if shuffle && row.len() < rb + 16 {
                // The 16-byte block loads may run past the last row: read it from a padded copy.
                padded.resize(rb + 16, 0u8);
                padded[..rb].copy_from_slice(&row[..rb]);
                padded.as_ptr()
            } else {
                row.as_ptr()
            };
            let scales = &b.scales[i * ng..(i + 1) * ng];
            let biases = b.biases[i * ng..(i + 1) * ng].as_ptr().cast::<u8>();
            if full {
                let acc = affine_acc::<AFFINE_TILE>(shuffle, bits, cp, scales, gs, xs, cols);
                let bd = dense_dots::<F32, AFFINE_TILE>(biases, xsum, ng);
                for j in 0..AFFINE_TILE {
                    out[(r0 + j) * stride + i] = hsum(acc[j]) + bd[j];
                }
            } else {
                let acc = affine_acc::<1>(shuffle, bits, cp, scales, gs, xs, cols);
                let bd = dense_dots::<F32, 1>(biases, xsum, ng);
                out[r0 * stride + i] = hsum(acc[0]) + bd[0];
            }
        }
        r0 += if full { AFFINE_TILE } else { 1 };
    }
}
