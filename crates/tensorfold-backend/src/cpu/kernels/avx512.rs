//! AVX-512F+BW dense kernels: 16-lane vectors, two accumulators per output in a fixed pattern and one fixed
//! horizontal sum, so an output's bits depend only on its weight row and its x row, never on the tile.
#![allow(clippy::needless_range_loop)]

use super::Block;
use std::arch::x86_64::*;
use tensorfold_core::DenseDType;

/// Rows of x in a dense tile: WROWS·DENSE_TILE·2 accumulators stay in registers.
const DENSE_TILE: usize = 4;
/// Weight rows a dense tile loads together (each x load then feeds WROWS products).
const WROWS: usize = 3;

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
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn load16<const DT: u8>(p: *const u8) -> __m512 {
    match DT {
        F32 => _mm512_loadu_ps(p.cast()),
        F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
        _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
            _mm256_loadu_si256(p.cast()),
        ))),
    }
}

/// One element, converted exactly as `load16` does.
#[inline]
unsafe fn load1<const DT: u8>(p: *const u8) -> f32 {
    match DT {
        F32 => f32::from_bits(u32::from_le(p.cast::<u32>().read_unaligned())),
        F16 => half::f16::from_bits(u16::from_le(p.cast::<u16>().read_unaligned())).to_f32(),
        _ => f32::from_bits((u16::from_le(p.cast::<u16>().read_unaligned()) as u32) << 16),
    }
}

/// Fixed horizontal sum: (lo256 + hi256), (lo128 + hi128), lanes (0+2, 1+3), then (0 + 1).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
pub(super) unsafe fn hsum(v: __m512) -> f32 {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let v = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Dot products of R weight rows (stride `rb` bytes) with T x rows (stride `cols`). For every pair, columns
/// [c, c+16) of each 32-column step go to acc0 and [c+16, c+32) to acc1, a final partial step reads masked
/// (zeroed) lanes, and the result is hsum(acc0 + acc1): the same arithmetic whatever R and T are.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dense_grid<const DT: u8, const R: usize, const T: usize>(
    w: *const u8,
    rb: usize,
    xs: *const f32,
    cols: usize,
) -> [[f32; T]; R] {
    let sz = if DT == F32 { 4 } else { 2 };
    let mut a0 = [[_mm512_setzero_ps(); T]; R];
    let mut a1 = [[_mm512_setzero_ps(); T]; R];
    let full = cols - cols % 32;
    let mut c = 0;
    while c < full {
        let mut wv = [_mm512_setzero_ps(); R];
        for r in 0..R {
            wv[r] = load16::<DT>(w.add(r * rb + c * sz));
        }
        for t in 0..T {
            let x = _mm512_loadu_ps(xs.add(t * cols + c));
            for r in 0..R {
                a0[r][t] = _mm512_fmadd_ps(wv[r], x, a0[r][t]);
            }
        }
        for r in 0..R {
            wv[r] = load16::<DT>(w.add(r * rb + (c + 16) * sz));
        }
        for t in 0..T {
            let x = _mm512_loadu_ps(xs.add(t * cols + c + 16));
            for r in 0..R {
                a1[r][t] = _mm512_fmadd_ps(wv[r], x, a1[r][t]);
            }
        }
        c += 32;
    }
    if c < cols {
        // Masked-off lanes read as zero: the same as a zero-padded step, without touching memory past the end.
        let rem = cols - c;
        let k0 = ((1u32 << rem) - 1) as __mmask16;
        let k1 = (((1u64 << rem) - 1) >> 16) as __mmask16;
        for r in 0..R {
            let (w0, w1) = if DT == F32 {
                let p = w.add(r * rb + c * sz).cast::<f32>();
                (
                    _mm512_maskz_loadu_ps(k0, p),
                    _mm512_maskz_loadu_ps(k1, p.add(16)),
                )
            } else {
                let mut wb = [0f32; 32];
                for (i, v) in wb[..rem].iter_mut().enumerate() {
                    *v = load1::<DT>(w.add(r * rb + (c + i) * sz));
                }
                (
                    _mm512_loadu_ps(wb.as_ptr()),
                    _mm512_loadu_ps(wb.as_ptr().add(16)),
                )
            };
            for t in 0..T {
                let x = xs.add(t * cols + c);
                a0[r][t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(k0, x), a0[r][t]);
                a1[r][t] = _mm512_fmadd_ps(w1, _mm512_maskz_loadu_ps(k1, x.add(16)), a1[r][t]);
            }
        }
    }
    let mut out = [[0f32; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = hsum(_mm512_add_ps(a0[r][t], a1[r][t]));
        }
    }
    out
}

/// One weight row against N x rows (see `dense_grid`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dense_dots<const DT: u8, const N: usize>(
    w: *const u8,
    xs: *const f32,
    cols: usize,
) -> [f32; N] {
    dense_grid::<DT, 1, N>(w, 0, xs, cols)[0]
}

/// `dense_rows` over f32 weight rows (the affine kernels' dequantized blocks).
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn dense_rows_f32(
    w: *const f32,
    n_o: usize,
    xs: *const f32,
    nr: usize,
    cols: usize,
    out: &mut [f32],
    stride: usize,
) {
    dense_rows::<F32>(w.cast(), cols * 4, n_o, xs, nr, cols, out, stride);
}

/// f32 weights against N x rows (see `dense_grid`), for the affine kernels' bias terms.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub(super) unsafe fn dense_dots_f32<const N: usize>(
    w: *const f32,
    xs: *const f32,
    cols: usize,
) -> [f32; N] {
    dense_dots::<F32, N>(w.cast(), xs, cols)
}

/// Σ a[i]·b[i] in the dense order above. Caller: avx512f, avx512bw, avx2, fma and f16c are available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    dense_dots::<F32, 1>(a.as_ptr().cast(), b.as_ptr(), a.len())[0]
}

/// y[i] = fma(alpha, x[i], y[i]). Caller: avx512f, avx512bw and fma are available.
#[target_feature(enable = "avx512f,avx512bw,fma")]
pub(super) unsafe fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: lengths differ");
    let n = x.len();
    let a = _mm512_set1_ps(alpha);
    let mut i = 0;
    while i + 16 <= n {
        let p = y.as_mut_ptr().add(i);
        _mm512_storeu_ps(
            p,
            _mm512_fmadd_ps(a, _mm512_loadu_ps(x.as_ptr().add(i)), _mm512_loadu_ps(p)),
        );
        i += 16;
    }
    for k in i..n {
        y[k] = alpha.mul_add(x[k], y[k]);
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn convert_dt<const DT: u8>(p: *const u8, out: &mut [f32]) {
    let sz = if DT == F32 { 4 } else { 2 };
    let n = out.len();
    let mut i = 0;
    while i + 16 <= n {
        _mm512_storeu_ps(out.as_mut_ptr().add(i), load16::<DT>(p.add(i * sz)));
        i += 16;
    }
    for k in i..n {
        out[k] = load1::<DT>(p.add(k * sz));
    }
}

/// Exact conversion of `out.len()` elements. Caller: avx512f, avx512bw, avx2, fma and f16c are available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
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
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
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
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
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
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
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
