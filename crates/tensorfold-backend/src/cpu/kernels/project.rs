//! The projection driver: one kernel per (SIMD level, format), x prepared once per call, output features split
//! across threads and x rows tiled against each loaded weight row, none of which changes an element's arithmetic.

use rayon::prelude::*;
use std::borrow::Cow;
use tensorfold_core::{DenseDType, MatrixRef};

#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512};
use super::{convert_with, scalar, supported, Isa};

/// Largest x-row tile of any kernel.
const MAX_TILE: usize = 8;
/// Weight bytes of one block of rows that the x-row tiles sweep (kept in L2 across tiles).
const BLOCK_BYTES: usize = 256 * 1024;
/// Multiply-adds below which a call stays on the calling thread.
const SERIAL_WORK: usize = 1 << 18;

/// How codes reach the vector lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// Whole row unpacked to f32, then scalar dots (scalar level).
    Unpacked,
    /// Bytes widened to u32 lanes, x permuted to match (bits 2, 4, 8); `lanes` = vector width.
    Bytes { lanes: usize },
    /// 8-code blocks spread by a byte shuffle, natural order (any width).
    Shuffle,
}

/// The kernel one call runs; fixed by the SIMD level and the format, never by the row count.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Dense { isa: Isa },
    Affine { isa: Isa, path: Path, bits: u32, gs: usize },
}

impl Kernel {
    fn new(isa: Isa, w: &MatrixRef<'_>) -> Kernel {
        match *w {
            MatrixRef::Dense { .. } => Kernel::Dense { isa },
            MatrixRef::Affine { bits, group_size: gs, .. } => {
                let (isa, path) = affine_choice(isa, bits, gs);
                Kernel::Affine { isa, path, bits, gs }
            }
        }
    }
    fn isa(&self) -> Isa {
        match *self {
            Kernel::Dense { isa, .. } | Kernel::Affine { isa, .. } => isa,
        }
    }
    fn tile(&self) -> usize {
        match self.isa() {
            Isa::Scalar => scalar::TILE,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::TILE,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::TILE,
            #[cfg(not(target_arch = "x86_64"))]
            _ => scalar::TILE,
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn affine_choice(isa: Isa, bits: u32, gs: usize) -> (Isa, Path) {
    match isa {
        Isa::Scalar => (Isa::Scalar, Path::Unpacked),
        Isa::Avx512 if avx512::handles(bits, gs) => (Isa::Avx512, Path::Bytes { lanes: 16 }),
        _ if matches!(bits, 2 | 4 | 8) => (Isa::Avx2, Path::Bytes { lanes: 8 }),
        _ => (Isa::Avx2, Path::Shuffle),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn affine_choice(_isa: Isa, _bits: u32, _gs: usize) -> (Isa, Path) {
    (Isa::Scalar, Path::Unpacked)
}

/// x as the kernel reads it, plus per-group sums of x for affine biases (both depend on x's row only).
struct Prepared<'a> {
    xs: Cow<'a, [f32]>,
    xsum: Vec<f32>,
}

impl<'a> Prepared<'a> {
    fn new(kernel: &Kernel, x: &'a [f32], cols: usize) -> Prepared<'a> {
        match *kernel {
            Kernel::Dense { .. } => Prepared { xs: Cow::Borrowed(x), xsum: Vec::new() },
            Kernel::Affine { path, bits, gs, .. } => {
                let xsum = x
                    .chunks_exact(gs)
                    .map(|g| g.iter().map(|&v| v as f64).sum::<f64>() as f32)
                    .collect();
                let xs = match path {
                    Path::Bytes { lanes } if bits != 8 => Cow::Owned(permute_bytes(x, bits, lanes)),
                    _ => Cow::Borrowed(x),
                };
                debug_assert!(cols % gs == 0);
                Prepared { xs, xsum }
            }
        }
    }
}

/// Reorders x in chunks of `lanes · 8/bits` so that x'[k·lanes + i] = x[i·(8/bits) + k]: lane i of code vector
/// k (byte i shifted by k·bits) then meets its x in one contiguous load.
fn permute_bytes(x: &[f32], bits: u32, lanes: usize) -> Vec<f32> {
    let per = (8 / bits) as usize;
    let chunk = lanes * per;
    let mut out = vec![0f32; x.len()];
    for (src, dst) in x.chunks_exact(chunk).zip(out.chunks_exact_mut(chunk)) {
        for k in 0..per {
            for i in 0..lanes {
                dst[k * lanes + i] = src[i * per + k];
            }
        }
    }
    out
}

/// Panics with the shapes involved when W's byte slices cannot hold the matrix it claims to be.
fn check_matrix(w: &MatrixRef<'_>) {
    match *w {
        MatrixRef::Dense { dtype, data, rows, cols } => {
            let need = rows * cols * dtype.size();
            assert!(data.len() >= need, "dense {rows}x{cols} {}: {} bytes, need {need}", dtype.name(), data.len());
        }
        MatrixRef::Affine { bits, group_size: gs, codes, scales, biases, scale_dtype, rows, cols } => {
            assert!(matches!(bits, 2 | 3 | 4 | 5 | 6 | 8), "affine {rows}x{cols}: unsupported {bits}-bit codes");
            assert!(gs >= 32 && gs % 32 == 0, "affine {rows}x{cols}: group size {gs} is not a multiple of 32");
            assert!(cols % gs == 0, "affine {rows}x{cols}: cols not a multiple of group size {gs}");
            let need = rows * cols * bits as usize / 8;
            assert!(codes.len() >= need, "affine {rows}x{cols} {bits}-bit: {} code bytes, need {need}", codes.len());
            let need = rows * (cols / gs) * scale_dtype.size();
            assert!(scales.len() >= need, "affine {rows}x{cols}: {} scale bytes, need {need}", scales.len());
            assert!(biases.len() >= need, "affine {rows}x{cols}: {} bias bytes, need {need}", biases.len());
        }
    }
}

/// Output features per parallel task (all of them when the call is too small to split).
fn chunk_rows(rows: usize, n_rows: usize, cols: usize) -> usize {
    let threads = rayon::current_num_threads();
    if threads <= 1 || rows.saturating_mul(cols).saturating_mul(n_rows) < SERIAL_WORK {
        return rows;
    }
    rows.div_ceil(threads * 4).max(4)
}

pub(super) fn project_with(isa: Isa, x: &[f32], n_rows: usize, w: &MatrixRef<'_>, y: &mut [f32]) {
    debug_assert!(supported(isa));
    let (rows, cols) = (w.rows(), w.cols());
    assert_eq!(x.len(), n_rows * cols, "project: x has {} values, expected {n_rows}x{cols}", x.len());
    assert_eq!(y.len(), n_rows * rows, "project: y has {} values, expected {n_rows}x{rows}", y.len());
    check_matrix(w);
    if n_rows == 0 || rows == 0 {
        return;
    }
    let kernel = Kernel::new(isa, w);
    let prep = Prepared::new(&kernel, x, cols);
    let cs = chunk_rows(rows, n_rows, cols);
    if cs >= rows {
        // One chunk: its [n_rows][rows] layout is y's.
        run_chunk(&kernel, w, &prep, n_rows, 0, rows, y);
    } else if n_rows == 1 {
        y.par_chunks_mut(cs)
            .enumerate()
            .for_each(|(c, out)| run_chunk(&kernel, w, &prep, 1, c * cs, out.len(), out));
    } else {
        // Chunk c fills tmp[c·cs·n_rows ..] as [n_rows][len]; rows of y gather their pieces afterwards.
        let mut tmp = vec![0f32; n_rows * rows];
        tmp.par_chunks_mut(cs * n_rows)
            .enumerate()
            .for_each(|(c, out)| run_chunk(&kernel, w, &prep, n_rows, c * cs, out.len() / n_rows, out));
        y.par_chunks_mut(rows).enumerate().for_each(|(r, yr)| {
            for (c, dst) in yr.chunks_mut(cs).enumerate() {
                let (len, base) = (dst.len(), c * cs * n_rows);
                dst.copy_from_slice(&tmp[base + r * len..base + (r + 1) * len]);
            }
        });
    }
}

/// Fills out[r·len + i] = y[r, o0 + i] for all x rows r and i < len.
fn run_chunk(
    kernel: &Kernel,
    w: &MatrixRef<'_>,
    prep: &Prepared<'_>,
    n_rows: usize,
    o0: usize,
    len: usize,
    out: &mut [f32],
) {
    let cols = w.cols();
    let tile = kernel.tile();
    let mut scratch = Vec::new();
    let mut t = [0f32; MAX_TILE];
    match *w {
        MatrixRef::Dense { dtype, data, .. } => {
            let rb = cols * dtype.size();
            let ob = (BLOCK_BYTES / rb.max(1)).clamp(1, len);
            for b0 in (0..len).step_by(ob) {
                let b1 = (b0 + ob).min(len);
                for r0 in (0..n_rows).step_by(tile) {
                    let nr = tile.min(n_rows - r0);
                    let xs = &prep.xs[r0 * cols..(r0 + nr) * cols];
                    for o in b0..b1 {
                        let wrow = &data[(o0 + o) * rb..(o0 + o + 1) * rb];
                        dense_tile(kernel.isa(), dtype, wrow, xs, cols, &mut t[..nr], &mut scratch);
                        for (j, v) in t[..nr].iter().enumerate() {
                            out[(r0 + j) * len + o] = *v;
                        }
                    }
                }
            }
        }
        MatrixRef::Affine { codes, scales, biases, scale_dtype, group_size: gs, bits, .. } => {
            let rb = cols * bits as usize / 8;
            let ng = cols / gs;
            let sz = scale_dtype.size();
            let ob = (BLOCK_BYTES / rb.max(1)).clamp(1, len);
            let mut sb = vec![0f32; ob * ng];
            let mut bb = vec![0f32; ob * ng];
            for b0 in (0..len).step_by(ob) {
                let b1 = (b0 + ob).min(len);
                let n = (b1 - b0) * ng;
                let (s0, s1) = ((o0 + b0) * ng * sz, (o0 + b1) * ng * sz);
                convert_with(kernel.isa(), scale_dtype, &scales[s0..s1], &mut sb[..n]);
                convert_with(kernel.isa(), scale_dtype, &biases[s0..s1], &mut bb[..n]);
                for r0 in (0..n_rows).step_by(tile) {
                    let nr = tile.min(n_rows - r0);
                    let xs = &prep.xs[r0 * cols..(r0 + nr) * cols];
                    let xsum = &prep.xsum[r0 * ng..(r0 + nr) * ng];
                    for o in b0..b1 {
                        let sg = &sb[(o - b0) * ng..(o - b0 + 1) * ng];
                        let bg = &bb[(o - b0) * ng..(o - b0 + 1) * ng];
                        let row = Row { codes: &codes[(o0 + o) * rb..], scales: sg, biases: bg };
                        affine_tile(kernel, row, xs, xsum, cols, &mut t[..nr], &mut scratch);
                        for (j, v) in t[..nr].iter().enumerate() {
                            out[(r0 + j) * len + o] = *v;
                        }
                    }
                }
            }
        }
    }
}

fn dense_tile(isa: Isa, dtype: DenseDType, wrow: &[u8], xs: &[f32], cols: usize, out: &mut [f32], scratch: &mut Vec<f32>) {
    match isa {
        // SAFETY: `Isa::Avx512` exists only where avx512f, avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::dense_tile(dtype, wrow, xs, cols, out) },
        // SAFETY: `Isa::Avx2` exists only where avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::dense_tile(dtype, wrow, xs, cols, out) },
        _ => scalar::dense_tile(dtype, wrow, xs, cols, out, scratch),
    }
}

/// One affine weight row: codes from its start to the end of the matrix, scales and biases as f32.
#[derive(Clone, Copy)]
struct Row<'a> {
    codes: &'a [u8],
    scales: &'a [f32],
    biases: &'a [f32],
}

fn affine_tile(kernel: &Kernel, row: Row<'_>, xs: &[f32], xsum: &[f32], cols: usize, out: &mut [f32], scratch: &mut Vec<f32>) {
    let Kernel::Affine { isa, path, bits, gs } = *kernel else {
        unreachable!("affine_tile needs an affine kernel")
    };
    let Row { codes, scales, biases } = row;
    match isa {
        // SAFETY: `Isa::Avx512` exists only where avx512f, avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::affine_tile(bits, gs, codes, scales, biases, xs, xsum, cols, out) },
        // SAFETY: `Isa::Avx2` exists only where avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe {
            avx2::affine_tile(path == Path::Shuffle, bits, gs, codes, scales, biases, xs, xsum, cols, out)
        },
        _ => {
            let codes = &codes[..cols * bits as usize / 8];
            scalar::affine_tile(bits, gs, codes, scales, biases, xs, xsum, cols, out, scratch)
        }
    }
}

pub(super) fn matrix_row_with(isa: Isa, w: &MatrixRef<'_>, row: usize, out: &mut [f32]) {
    let (rows, cols) = (w.rows(), w.cols());
    assert!(row < rows, "matrix_row: row {row} of a {rows}-row matrix");
    assert_eq!(out.len(), cols, "matrix_row: out has {} values, expected {cols}", out.len());
    check_matrix(w);
    match *w {
        MatrixRef::Dense { dtype, data, .. } => {
            let rb = cols * dtype.size();
            convert_with(isa, dtype, &data[row * rb..(row + 1) * rb], out);
        }
        MatrixRef::Affine { bits, group_size: gs, codes, scales, biases, scale_dtype, .. } => {
            let rb = cols * bits as usize / 8;
            scalar::unpack_codes(bits, &codes[row * rb..(row + 1) * rb], out);
            let ng = cols / gs;
            for (g, q) in out.chunks_exact_mut(gs).enumerate() {
                let s = scale_dtype.read(scales, row * ng + g);
                let b = scale_dtype.read(biases, row * ng + g);
                for v in q {
                    *v = s * *v + b;
                }
            }
        }
    }
}
