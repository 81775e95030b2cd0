//! Portable scalar kernels (the variant used where no SIMD level is detected) and the exact conversions and
//! bit unpacking that every variant shares; each reduction runs over 8 interleaved lanes and one fixed tree.

use tensorfold_core::DenseDType;

/// Interleaved accumulator lanes of the scalar variant (lets compilers vectorise without reassociating).
const LANES: usize = 8;

/// Rows of x processed against one loaded weight row.
pub(super) const TILE: usize = 4;

/// Converts little-endian elements of `dtype` to f32 (exact for every dtype); `out.len()` elements are read.
pub(super) fn convert(dtype: DenseDType, bytes: &[u8], out: &mut [f32]) {
    assert!(bytes.len() >= out.len() * dtype.size(), "convert: {} bytes for {} elements", bytes.len(), out.len());
    match dtype {
        DenseDType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        DenseDType::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
        DenseDType::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
            }
        }
    }
}

/// Unpacks `out.len()` codes of `bits` bits from an LSB-first bitstream into f32 (exact small integers).
pub(super) fn unpack_codes(bits: u32, codes: &[u8], out: &mut [f32]) {
    let bits = bits as usize;
    assert!(codes.len() * 8 >= out.len() * bits, "unpack: {} bytes for {} codes", codes.len(), out.len());
    let mask = (1u32 << bits) - 1;
    for (c, o) in out.iter_mut().enumerate() {
        let bit = c * bits;
        let byte = bit >> 3;
        let lo = codes[byte] as u32;
        let hi = codes.get(byte + 1).copied().unwrap_or(0) as u32;
        *o = (((lo | (hi << 8)) >> (bit & 7)) & mask) as f32;
    }
}

/// Σ a[i]·b[i]: lane i % 8 accumulates with separate multiply and add, then ((0+1)+(2+3))+((4+5)+(6+7)).
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    let mut acc = [0f32; LANES];
    let mut ac = a.chunks_exact(LANES);
    let mut bc = b.chunks_exact(LANES);
    for (x, y) in (&mut ac).zip(&mut bc) {
        for k in 0..LANES {
            acc[k] += x[k] * y[k];
        }
    }
    for (k, (x, y)) in ac.remainder().iter().zip(bc.remainder()).enumerate() {
        acc[k] += x * y;
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

/// y[i] += alpha·x[i] with a separately rounded product.
pub(super) fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: lengths differ");
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

/// out[j] = W row · x row j for the `out.len()` consecutive x rows in `xs` (stride `cols`).
pub(super) fn dense_tile(
    dtype: DenseDType,
    wrow: &[u8],
    xs: &[f32],
    cols: usize,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    scratch.resize(cols, 0.0);
    convert(dtype, wrow, scratch);
    for (j, o) in out.iter_mut().enumerate() {
        *o = dot(scratch, &xs[j * cols..(j + 1) * cols]);
    }
}

/// Affine out[j] = Σ_g s_g·(q_g · x_g) + (biases · xsum_j), groups in order, x in natural order.
#[allow(clippy::too_many_arguments)]
pub(super) fn affine_tile(
    bits: u32,
    gs: usize,
    codes: &[u8],
    scales: &[f32],
    biases: &[f32],
    xs: &[f32],
    xsum: &[f32],
    cols: usize,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    let ng = scales.len();
    scratch.resize(cols, 0.0);
    unpack_codes(bits, codes, scratch);
    for (j, o) in out.iter_mut().enumerate() {
        let x = &xs[j * cols..(j + 1) * cols];
        let mut acc = 0f32;
        for (g, s) in scales.iter().enumerate() {
            let r = g * gs..(g + 1) * gs;
            acc += s * dot(&scratch[r.clone()], &x[r]);
        }
        *o = acc + dot(biases, &xsum[j * ng..(j + 1) * ng]);
    }
}
