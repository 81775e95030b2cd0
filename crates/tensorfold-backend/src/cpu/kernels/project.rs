//! The projection driver: one kernel per (SIMD level, format), x prepared once per call, output features split
//! across threads in blocks that every x row sweeps; none of this changes any element's arithmetic.

use rayon::prelude::*;
use std::borrow::Cow;
use tensorfold_core::MatrixRef;

#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512, avx512q};
use super::{convert_with, scalar, supported, Block, Isa};

/// Stored weight bytes of one block of rows (kept in L2 while every x row sweeps it).
const BLOCK_BYTES: usize = 256 * 1024;
/// Multiply-adds below which a call stays on the calling thread.
const SERIAL_WORK: usize = 1 << 18;
/// Output values below which the multi-row gather runs on the calling thread.
const GATHER_SERIAL: usize = 1 << 18;

/// How codes reach the vector lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Path {
    /// Whole row unpacked to f32, then scalar dots (scalar level).
    Unpacked,
    /// Bytes widened to u32 lanes, x permuted to match (bits 2, 4, 8); `lanes` = vector width.
    Bytes { lanes: usize },
    /// Blocks of 8 (AVX2) or 16 (AVX-512) codes spread over lanes by a byte shuffle; x in natural order.
    Shuffle,
}

/// The kernel one call runs; fixed by the SIMD level and the format, never by the row count.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Dense {
        isa: Isa,
    },
    Affine {
        isa: Isa,
        path: Path,
        bits: u32,
        gs: usize,
    },
}

impl Kernel {
    fn new(isa: Isa, w: &MatrixRef<'_>) -> Kernel {
        match *w {
            MatrixRef::Dense { .. } => Kernel::Dense { isa },
            MatrixRef::Affine {
                bits,
                group_size: gs,
                ..
            } => {
                let (isa, path) = affine_choice(isa, bits, gs);
                Kernel::Affine {
                    isa,
                    path,
                    bits,
                    gs,
                }
            }
        }
    }
    fn isa(&self) -> Isa {
        match *self {
            Kernel::Dense { isa, .. } | Kernel::Affine { isa, .. } => isa,
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn affine_choice(isa: Isa, bits: u32, gs: usize) -> (Isa, Path) {
    match isa {
        Isa::Scalar => (Isa::Scalar, Path::Unpacked),
        Isa::Avx512 if avx512q::uses_bytes(bits, gs) => (Isa::Avx512, Path::Bytes { lanes: 16 }),
        Isa::Avx512 => (Isa::Avx512, Path::Shuffle),
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
        let Kernel::Affine { path, bits, gs, .. } = *kernel else {
            return Prepared {
                xs: Cow::Borrowed(x),
                xsum: Vec::new(),
            };
        };
        debug_assert!(cols.is_multiple_of(gs));
        // Rows are independent: split them across threads when there are many.
        let rows_per_task = (SERIAL_WORK / 16 / cols.max(1)).max(1);
        let mut xsum = vec![0f32; x.len() / gs];
        x.par_chunks(rows_per_task * cols)
            .zip(xsum.par_chunks_mut(rows_per_task * cols / gs))
            .for_each(|(x, s)| group_sums(x, gs, s));
        let xs = match path {
            Path::Bytes { lanes } if bits != 8 => {
                let mut xp = vec![0f32; x.len()];
                xp.par_chunks_mut(rows_per_task * cols)
                    .zip(x.par_chunks(rows_per_task * cols))
                    .for_each(|(d, s)| permute_bytes(s, bits, lanes, d));
                Cow::Owned(xp)
            }
            _ => Cow::Borrowed(x),
        };
        Prepared { xs, xsum }
    }
}

/// out[g] = Σ of x over group g, accumulated in f64 over four interleaved partial sums, rounded once.
fn group_sums(x: &[f32], gs: usize, out: &mut [f32]) {
    for (g, o) in x.chunks_exact(gs).zip(out.iter_mut()) {
        let mut p = [0f64; 4];
        for c in g.chunks_exact(4) {
            for k in 0..4 {
                p[k] += c[k] as f64;
            }
        }
        *o = ((p[0] + p[1]) + (p[2] + p[3])) as f32;
    }
}

/// Reorders x in chunks of `lanes · 8/bits` so that x'[k·lanes + i] = x[i·(8/bits) + k]: lane i of code vector
/// k (byte i shifted by k·bits) then meets its x in one contiguous load.
fn permute_bytes(x: &[f32], bits: u32, lanes: usize, out: &mut [f32]) {
    match (8 / bits, lanes) {
        (2, 8) => permute::<2, 8>(x, out),
        (2, 16) => permute::<2, 16>(x, out),
        (4, 8) => permute::<4, 8>(x, out),
        (4, 16) => permute::<4, 16>(x, out),
        (per, lanes) => {
            unreachable!("no byte permutation for {per} codes per byte in {lanes} lanes")
        }
    }
}

fn permute<const PER: usize, const LANES: usize>(x: &[f32], out: &mut [f32]) {
    for (src, dst) in x
        .chunks_exact(PER * LANES)
        .zip(out.chunks_exact_mut(PER * LANES))
    {
        let (src, dst) = (&src[..PER * LANES], &mut dst[..PER * LANES]);
        for k in 0..PER {
            for i in 0..LANES {
                dst[k * LANES + i] = src[i * PER + k];
            }
        }
    }
}

/// Panics with the shapes involved when W's byte slices cannot hold the matrix it claims to be.
fn check_matrix(w: &MatrixRef<'_>) {
    match *w {
        MatrixRef::Dense {
            dtype,
            data,
            rows,
            cols,
        } => {
            let need = rows * cols * dtype.size();
            assert!(
                data.len() >= need,
                "dense {rows}x{cols} {}: {} bytes, need {need}",
                dtype.name(),
                data.len()
            );
        }
        MatrixRef::Affine {
            bits,
            group_size: gs,
            codes,
            scales,
            biases,
            scale_dtype,
            rows,
            cols,
        } => {
            assert!(
                matches!(bits, 2 | 3 | 4 | 5 | 6 | 8),
                "affine {rows}x{cols}: unsupported {bits}-bit codes"
            );
            assert!(
                matches!(gs, 32 | 64 | 128),
                "affine {rows}x{cols}: group size {gs} is not 32, 64 or 128"
            );
            assert!(
                cols.is_multiple_of(gs),
                "affine {rows}x{cols}: cols not a multiple of group size {gs}"
            );
            let need = rows * cols * bits as usize / 8;
            assert!(
                codes.len() >= need,
                "affine {rows}x{cols} {bits}-bit: {} code bytes, need {need}",
                codes.len()
            );
            let need = rows * (cols / gs) * scale_dtype.size();
            assert!(
                scales.len() >= need,
                "affine {rows}x{cols}: {} scale bytes, need {need}",
                scales.len()
            );
            assert!(
                biases.len() >= need,
                "affine {rows}x{cols}: {} bias bytes, need {need}",
                biases.len()
            );
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
    assert_eq!(
        x.len(),
        n_rows * cols,
        "project: x has {} values, expected {n_rows}x{cols}",
        x.len()
    );
    assert_eq!(
        y.len(),
        n_rows * rows,
        "project: y has {} values, expected {n_rows}x{rows}",
        y.len()
    );
    check_matrix(w);
    if n_rows == 0 || rows == 0 {
        return;
    }
    if cols == 0 {
        y.fill(0.0);
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
            .for_each(|(c, out)| {
                run_chunk(&kernel, w, &prep, n_rows, c * cs, out.len() / n_rows, out)
            });
        let gather = |(r, yr): (usize, &mut [f32])| {
            for (c, dst) in yr.chunks_mut(cs).enumerate() {
                let (len, base) = (dst.len(), c * cs * n_rows);
                dst.copy_from_slice(&tmp[base + r * len..base + (r + 1) * len]);
            }
        };
        // A window's few rows are a small copy: another parallel region would cost more (thread wake-ups) than
        // the copy itself. Prompt chunks are gathered in parallel.
        if n_rows * rows < GATHER_SERIAL {
            y.chunks_mut(rows).enumerate().for_each(gather);
        } else {
            y.par_chunks_mut(rows).enumerate().for_each(gather);
        }
    }
}

/// Fills out[r·len + i] = y[r, o0 + i] for all x rows r and i < len, in blocks of weight rows sized to stay
/// in L2 while the kernel sweeps every x row over them.
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
    let mut scratch = Vec::new();
    let (rb, ng) = match *w {
        MatrixRef::Dense { dtype, .. } => (cols * dtype.size(), 0),
        MatrixRef::Affine {
            bits, group_size, ..
        } => (cols * bits as usize / 8, cols / group_size),
    };
    let ob = (BLOCK_BYTES / rb.max(1)).clamp(1, len);
    let (mut sb, mut bb) = (vec![0f32; ob * ng], vec![0f32; ob * ng]);
    for b0 in (0..len).step_by(ob) {
        let (first, n_o) = (o0 + b0, ob.min(len - b0));
        let wb = match *w {
            MatrixRef::Dense { data, .. } => &data[first * rb..(first + n_o) * rb],
            MatrixRef::Affine {
                codes,
                scales,
                biases,
                scale_dtype,
                ..
            } => {
                let sz = scale_dtype.size();
                let (s0, s1) = (first * ng * sz, (first + n_o) * ng * sz);
                convert_with(
                    kernel.isa(),
                    scale_dtype,
                    &scales[s0..s1],
                    &mut sb[..n_o * ng],
                );
                convert_with(
                    kernel.isa(),
                    scale_dtype,
                    &biases[s0..s1],
                    &mut bb[..n_o * ng],
                );
                &codes[first * rb..]
            }
        };
        let block = Block {
            w: wb,
            scales: &sb[..n_o * ng],
            biases: &bb[..n_o * ng],
            n_o,
            xs: &prep.xs,
            xsum: &prep.xsum,
            nr: n_rows,
            cols,
        };
        run_block(kernel, w, &block, &mut out[b0..], len, &mut scratch);
    }
}

fn run_block(
    kernel: &Kernel,
    w: &MatrixRef<'_>,
    b: &Block<'_>,
    out: &mut [f32],
    stride: usize,
    scratch: &mut Vec<f32>,
) {
    match (*kernel, *w) {
        (Kernel::Dense { isa }, MatrixRef::Dense { dtype, .. }) => match isa {
            // SAFETY: `Isa::Avx512` exists only where avx512f, avx512bw, avx2, fma and f16c were detected.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { avx512::dense_block(dtype, b, out, stride) },
            // SAFETY: `Isa::Avx2` exists only where avx2, fma and f16c were detected.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { avx2::dense_block(dtype, b, out, stride) },
            _ => scalar::dense_block(dtype, b, out, stride, scratch),
        },
        (
            Kernel::Affine {
                isa,
                path,
                bits,
                gs,
            },
            MatrixRef::Affine { .. },
        ) => match isa {
            // SAFETY: `Isa::Avx512` exists only where avx512f, avx512bw, avx2, fma and f16c were detected.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { avx512q::affine_block(bits, gs, b, out, stride) },
            // SAFETY: `Isa::Avx2` exists only where avx2, fma and f16c were detected.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe {
                avx2::affine_block(path == Path::Shuffle, bits, gs, b, out, stride)
            },
            _ => {
                debug_assert_eq!(path, Path::Unpacked);
                scalar::affine_block(bits, gs, b, out, stride, scratch)
            }
        },
        _ => unreachable!("kernel {kernel:?} does not match the matrix format"),
    }
}

pub(super) fn matrix_row_with(isa: Isa, w: &MatrixRef<'_>, row: usize, out: &mut [f32]) {
    let (rows, cols) = (w.rows(), w.cols());
    assert!(row < rows, "matrix_row: row {row} of a {rows}-row matrix");
    assert_eq!(
        out.len(),
        cols,
        "matrix_row: out has {} values, expected {cols}",
        out.len()
    );
    check_matrix(w);
    match *w {
        MatrixRef::Dense { dtype, data, .. } => {
            let rb = cols * dtype.size();
            convert_with(isa, dtype, &data[row * rb..(row + 1) * rb], out);
        }
        MatrixRef::Affine {
            bits,
            group_size: gs,
            codes,
            scales,
            biases,
            scale_dtype,
            ..
        } => {
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
