//! AVX-512F+BW kernels: 16-lane vectors, two accumulators per output in a fixed pattern and one fixed horizontal
//! sum, so an output's bits depend only on its weight row and its x row, never on the tile.
#![allow(clippy::needless_range_loop)]

use super::Block;
use std::arch::x86_64::*;
use tensorfold_core::DenseDType;

/// Rows of x in a dense tile: WROWS·DENSE_TILE·2 accumulators stay in registers.
pub(super) const DENSE_TILE: usize = 4;
/// Weight rows a dense tile loads together (each x load then feeds WROWS products).
const WROWS: usize = 3;
/// Rows of x in an affine tile, against one weight row.
pub(super) const AFFINE_TILE: usize = 8;

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
unsafe fn hsum(v: __m512) -> f32 {
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

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn dense_block_dt<const DT: u8>(b: &Block<'_>, rb: usize, out: &mut [f32], stride: usize) {
    let (xs, cols, nr) = (b.xs.as_ptr(), b.cols, b.nr);
    let mut i = 0;
    while i < b.n_o {
        let w = b.w.as_ptr().add(i * rb);
        if i + WROWS <= b.n_o {
            if nr == DENSE_TILE {
                let v = dense_grid::<DT, WROWS, DENSE_TILE>(w, rb, xs, cols);
                for r in 0..WROWS {
                    for t in 0..DENSE_TILE {
                        out[t * stride + i + r] = v[r][t];
                    }
                }
            } else {
                for t in 0..nr {
                    let v = dense_grid::<DT, WROWS, 1>(w, rb, xs.add(t * cols), cols);
                    for r in 0..WROWS {
                        out[t * stride + i + r] = v[r][0];
                    }
                }
            }
            i += WROWS;
        } else {
            if nr == DENSE_TILE {
                let v = dense_dots::<DT, DENSE_TILE>(w, xs, cols);
                for t in 0..DENSE_TILE {
                    out[t * stride + i] = v[t];
                }
            } else {
                for t in 0..nr {
                    out[t * stride + i] = dense_dots::<DT, 1>(w, xs.add(t * cols), cols)[0];
                }
            }
            i += 1;
        }
    }
}

/// out[j·stride + i] = W row i · x row j for the block's rows. Caller: avx512f, avx512bw, avx2, fma and f16c are available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub(super) unsafe fn dense_block(dtype: DenseDType, b: &Block<'_>, out: &mut [f32], stride: usize) {
    let rb = b.cols * dtype.size();
    b.check(DENSE_TILE, b.n_o * rb, 0, out.len(), stride);
    match dt_code(dtype) {
        F32 => dense_block_dt::<F32>(b, rb, out, stride),
        F16 => dense_block_dt::<F16>(b, rb, out, stride),
        _ => dense_block_dt::<BF16>(b, rb, out, stride),
    }
}

/// Affine group dots for bits 2, 4, 8 from 16-byte loads widened to 16 u32 lanes: after shift k, lane i holds
/// code i·(8/B) + k of the chunk, so `xs` must be permuted by `permute_bytes(bits, 16)` (2-bit needs groups
/// of a multiple of 64). Within a group, code vector t accumulates into g[t % 2]; after each group
/// acc = fma(s_g, g0 + g1, acc).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn bytes_acc<const B: u32, const N: usize>(
    codes: *const u8,
    scales: &[f32],
    gs: usize,
    xs: *const f32,
    cols: usize,
) -> [__m512; N] {
    let per_byte = (8 / B) as usize;
    let mask = _mm512_set1_epi32((1 << B) - 1);
    let mut acc = [_mm512_setzero_ps(); N];
    for (g, &s) in scales.iter().enumerate() {
        let mut g0 = [_mm512_setzero_ps(); N];
        let mut g1 = [_mm512_setzero_ps(); N];
        let end = (g + 1) * gs;
        let mut e = g * gs;
        while e < end {
            if B == 8 {
                let q0 =
                    _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(codes.add(e).cast())));
                let q1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                    codes.add(e + 16).cast(),
                )));
                for j in 0..N {
                    let x = xs.add(j * cols + e);
                    g0[j] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(x), g0[j]);
                    g1[j] = _mm512_fmadd_ps(q1, _mm512_loadu_ps(x.add(16)), g1[j]);
                }
                e += 32;
            } else {
                let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(codes.add(e * B as usize / 8).cast()));
                for k in 0..per_byte {
                    let sh = _mm512_srlv_epi32(v, _mm512_set1_epi32((B as usize * k) as i32));
                    let q = if (k + 1) * B as usize == 8 {
                        sh
                    } else {
                        _mm512_and_si512(sh, mask)
                    };
                    let q = _mm512_cvtepi32_ps(q);
                    for j in 0..N {
                        let x = _mm512_loadu_ps(xs.add(j * cols + e + 16 * k));
                        if k.is_multiple_of(2) {
                            g0[j] = _mm512_fmadd_ps(q, x, g0[j]);
                        } else {
                            g1[j] = _mm512_fmadd_ps(q, x, g1[j]);
                        }
                    }
                }
                e += 16 * per_byte;
            }
        }
        let sv = _mm512_set1_ps(s);
        for j in 0..N {
            acc[j] = _mm512_fmadd_ps(sv, _mm512_add_ps(g0[j], g1[j]), acc[j]);
        }
    }
    acc
}

/// Affine group dots for any width 2..=8 in natural order: each 16-code block (2·bits bytes) is read with one
/// 16-byte load (the caller guarantees 16 readable bytes) copied to all four 128-bit lanes, spread by a byte
/// shuffle, shifted and masked. Block t of a group accumulates into g[t % 2]; after each group
/// acc = fma(s_g, g0 + g1, acc).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn shuffle_acc<const N: usize>(
    bits: usize,
    codes: *const u8,
    scales: &[f32],
    gs: usize,
    xs: *const f32,
    cols: usize,
) -> [__m512; N] {
    let mut idx = [0x80u8; 64];
    let mut shifts = [0i32; 16];
    for l in 0..16 {
        let b0 = l * bits / 8;
        idx[4 * l] = b0 as u8;
        if b0 < 15 {
            idx[4 * l + 1] = (b0 + 1) as u8;
        }
        shifts[l] = (l * bits % 8) as i32;
    }
    let idx = _mm512_loadu_si512(idx.as_ptr().cast());
    let shv = _mm512_loadu_si512(shifts.as_ptr().cast());
    let mask = _mm512_set1_epi32((1 << bits) - 1);
    let mut acc = [_mm512_setzero_ps(); N];
    for (g, &s) in scales.iter().enumerate() {
        let mut g0 = [_mm512_setzero_ps(); N];
        let mut g1 = [_mm512_setzero_ps(); N];
        let end = (g + 1) * gs;
        let mut e = g * gs;
        while e < end {
            let v0 = _mm512_broadcast_i32x4(_mm_loadu_si128(codes.add(e / 8 * bits).cast()));
            let v1 = _mm512_broadcast_i32x4(_mm_loadu_si128(codes.add((e / 8 + 2) * bits).cast()));
            let q0 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(v0, idx), shv), mask);
            let q1 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(v1, idx), shv), mask);
            let q0 = _mm512_cvtepi32_ps(q0);
            let q1 = _mm512_cvtepi32_ps(q1);
            for j in 0..N {
                let x = xs.add(j * cols + e);
                g0[j] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(x), g0[j]);
                g1[j] = _mm512_fmadd_ps(q1, _mm512_loadu_ps(x.add(16)), g1[j]);
            }
            e += 32;
        }
        let sv = _mm512_set1_ps(s);
        for j in 0..N {
            acc[j] = _mm512_fmadd_ps(sv, _mm512_add_ps(g0[j], g1[j]), acc[j]);
        }
    }
    acc
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
unsafe fn affine_acc<const N: usize>(
    shuffle: bool,
    bits: u32,
    codes: *const u8,
    scales: &[f32],
    gs: usize,
    xs: *const f32,
    cols: usize,
) -> [__m512; N] {
    match (shuffle, bits) {
        (false, 2) => bytes_acc::<2, N>(codes, scales, gs, xs, cols),
        (false, 4) => bytes_acc::<4, N>(codes, scales, gs, xs, cols),
        (false, 8) => bytes_acc::<8, N>(codes, scales, gs, xs, cols),
        (true, b) => shuffle_acc::<N>(b as usize, codes, scales, gs, xs, cols),
        (false, b) => unreachable!("avx512 byte kernel has no {b}-bit form"),
    }
}

/// Whether the byte kernel handles this format (the shuffle kernel takes every other one).
pub(super) fn handles(bits: u32, gs: usize) -> bool {
    (matches!(bits, 4 | 8) && gs.is_multiple_of(32)) || (bits == 2 && gs.is_multiple_of(64))
}

/// Affine out[j·stride + i] = hsum(acc) + (biases_i · xsum_j) for the block's rows. `b.w` runs from the
/// block's first code row to the end of the matrix's codes; `b.xs` is permuted unless `shuffle` (see
/// `bytes_acc`). Caller: avx512f, avx512bw, avx2, fma and f16c are available.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
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
    assert!(gs.is_multiple_of(32) && cols.is_multiple_of(gs));
    assert!(shuffle || handles(bits, gs));
    b.check(AFFINE_TILE, b.n_o * rb, ng, out.len(), stride);
    let (xs, xsum) = (b.xs.as_ptr(), b.xsum.as_ptr());
    let mut padded = Vec::new();
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
        if nr == AFFINE_TILE {
            let acc = affine_acc::<AFFINE_TILE>(shuffle, bits, cp, scales, gs, xs, cols);
            let bd = dense_dots::<F32, AFFINE_TILE>(biases, xsum, ng);
            for j in 0..AFFINE_TILE {
                out[j * stride + i] = hsum(acc[j]) + bd[j];
            }
        } else {
            for j in 0..nr {
                let acc = affine_acc::<1>(shuffle, bits, cp, scales, gs, xs.add(j * cols), cols);
                let bd = dense_dots::<F32, 1>(biases, xsum.add(j * ng), ng);
                out[j * stride + i] = hsum(acc[0]) + bd[0];
            }
        }
    }
}
