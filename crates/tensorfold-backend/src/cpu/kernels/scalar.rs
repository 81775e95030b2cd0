//! Portable scalar kernels (the variant used where no SIMD level is detected) and the exact conversions and
//! bit unpacking that every variant shares; each reduction runs over 8 interleaved lanes and one fixed tree.

use super::Block;
use tensorfold_core::DenseDType;

/// Interleaved accumulator lanes of the scalar variant (lets compilers vectorise without reassociating).
const LANES: usize = 8;

/// Converts little-endian elements of `dtype` to f32 (exact for every dtype); `out.len()` elements are read.
pub(super) fn convert(dtype: DenseDType, bytes: &[u8], out: &mut [f32]) {
    assert!(
        bytes.len() >= out.len() * dtype.size(),
        "convert: {} bytes for {} elements",
        bytes.len(),
        out.len()
    );
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
    assert!(
        codes.len() * 8 >= out.len() * bits,
        "unpack: {} bytes for {} codes",
        codes.len(),
        out.len()
    );
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

/// out[j·stride + i] = W row i · x row j for the block's rows.
pub(super) fn dense_block(
    dtype: DenseDType,
    b: &Block<'_>,
    out: &mut [f32],
    stride: usize,
    scratch: &mut Vec<f32>,
) {
    let (cols, rb) = (b.cols, b.cols * dtype.size());
    b.check(b.n_o * rb, 0, out.len(), stride);
    scratch.resize(cols, 0.0);
    for i in 0..b.n_o {
        convert(dtype, &b.w[i * rb..(i + 1) * rb], scratch);
        for j in 0..b.nr {
            out[j * stride + i] = dot(scratch, &b.xs[j * cols..(j + 1) * cols]);
        }
    }
}

/// Affine out[j·stride + i] = Σ_g s_g·(q_g · x_g) + (biases_i · xsum_j), groups in order, x in natural order.
pub(super) fn affine_block(
    bits: u32,
    gs: usize,
    b: &Block<'_>,
    out: &mut [f32],
    stride: usize,
    scratch: &mut Vec<f32>,
) {
    let cols = b.cols;
    let (ng, rb) = (cols / gs, cols * bits as usize / 8);
    b.check(b.n_o * rb, ng, out.len(), stride);
    scratch.resize(cols, 0.0);
    for i in 0..b.n_o {
        unpack_codes(bits, &b.w[i * rb..(i + 1) * rb], scratch);
        let scales = &b.scales[i * ng..(i + 1) * ng];
        let biases = &b.biases[i * ng..(i + 1) * ng];
        for j in 0..b.nr {
            let x = &b.xs[j * cols..(j + 1) * cols];
            let mut acc = 0f32;
            for (g, s) in scales.iter().enumerate() {
                let r = g * gs..(g + 1) * gs;
                acc += s * dot(&scratch[r.clone()], &x[r]);
            }
            out[j * stride + i] = acc + dot(biases, &b.xsum[j * ng..(j + 1) * ng]);
        }
    }
}
