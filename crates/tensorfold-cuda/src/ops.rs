//! The row-wise ops on the device: weights uploaded in their stored format, embedding, RMSNorm (with the residual
//! add fused in), residual add, SwiGLU and row gathers; each output row depends on its own input row only.
//! Projections are in project.rs.

use crate::device::{Arg, Dev};
use crate::project::{alloc_prepared, fuse_prepare, fusion_enabled, tensor_core_a4};
use crate::scratch::Buf;
use cudarc::driver::CudaSlice;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use tensorfold_core::{CoreError, DenseDType, MatrixRef, Result, StoredMatrix};

/// Row-major f32 activations `[rows, cols]` on the device (shared, so a round's pending rows can keep them).
pub struct CudaAct {
    pub rows: usize,
    pub cols: usize,
    pub(crate) buf: Arc<Buf<f32>>,
    /// The tensor-core form of these rows, made by the first projection that needs it (q, k, v and the MLP's
    /// gate and up read the same rows).
    pub(crate) prepared: OnceLock<Prepared>,
}

/// x as bf16 hi + lo in the pair order of project_mma.cu, and its f32 sums over every 32 columns.
pub(crate) struct Prepared {
    pub(crate) hi: Buf<u16>,
    pub(crate) lo: Buf<u16>,
    pub(crate) sums: Buf<f32>,
    /// The rows as wgmma B tiles (project_wgmma.cu), written beside hi and lo, for rounds the wgmma kernel takes.
    pub(crate) b_tiles: Option<Buf<u32>>,
}

/// Sends the device's recorded launches when dropped: held first in whatever owns device buffers that are freed to
/// the driver when dropped (weights), so those launches, which may still read them, are queued before the frees.
/// A free is not a recorded launch: the driver runs it at once, before launches still waiting to be sent (graph.rs);
/// a checkpoint dropped right after a request's last round would otherwise be read after it is freed.
pub struct SendFirst(pub(crate) Arc<Dev>);

impl Drop for SendFirst {
    fn drop(&mut self) {
        self.0.send_recorded();
        // No later launch may ask L2 for memory that is about to be freed (ahead.rs).
        if let Ok(mut a) = self.0.ahead.lock() {
            a.forget();
        }
    }
}

/// A small f32 parameter vector on the device.
pub struct CudaVector {
    pub(crate) _send: SendFirst,
    pub(crate) buf: CudaSlice<f32>,
    pub len: usize,
}

/// A weight matrix on the device in its checkpoint format.
pub enum CudaMatrix {
    Dense {
        _send: SendFirst,
        dtype: DenseDType,
        data: CudaSlice<u8>,
        rows: usize,
        cols: usize,
    },
    Affine {
        _send: SendFirst,
        bits: u32,
        group_size: usize,
        codes: CudaSlice<u8>,
        scales: CudaSlice<u8>,
        biases: CudaSlice<u8>,
        scale_dtype: DenseDType,
        rows: usize,
        cols: usize,
        /// Codes, scales and biases in the tile-major layout the tensor-core kernels read (`tile_major`), else
        /// in the checkpoint's row-major one.
        tiled: bool,
    },
}

impl CudaMatrix {
    pub fn rows(&self) -> usize {
        match self {
            CudaMatrix::Dense { rows, .. } | CudaMatrix::Affine { rows, .. } => *rows,
        }
    }
    pub fn cols(&self) -> usize {
        match self {
            CudaMatrix::Dense { cols, .. } | CudaMatrix::Affine { cols, .. } => *cols,
        }
    }
}

pub(crate) fn dtype_name(d: DenseDType) -> &'static str {
    match d {
        DenseDType::F32 => "f32",
        DenseDType::F16 => "f16",
        DenseDType::BF16 => "bf16",
    }
}

pub(crate) fn blocks(n: usize, per: usize) -> u32 {
    n.div_ceil(per) as u32
}

/// Threads per block of the row-wise kernels.
pub(crate) const THREADS: u32 = 256;
/// Warps per projection block (PW in project.cu), output features per warp (OPW) and rows per tile (RT).
pub(crate) const PW: usize = 4;
pub(crate) const OPW: usize = 4;
pub(crate) const RT: usize = 8;

pub(crate) fn upload_matrix(dev: &Arc<Dev>, m: &StoredMatrix) -> Result<CudaMatrix> {
    let bad = |msg: String| Err(CoreError::Invalid(format!("CUDA matrix: {msg}")));
    if m.rows() > crate::project::MAX_OUTPUTS {
        return bad(format!(
            "{} outputs; the tensor-core launches take at most {} (tiles of 16 in a grid's y)",
            m.rows(),
            crate::project::MAX_OUTPUTS
        ));
    }
    let matrix = match m.view() {
        MatrixRef::Dense {
            dtype,
            data,
            rows,
            cols,
        } => {
            if data.len() < rows * cols * dtype.size() {
                return bad(format!(
                    "{rows}×{cols} {dtype:?} needs {} bytes, got {}",
                    rows * cols * dtype.size(),
                    data.len()
                ));
            }
            CudaMatrix::Dense {
                _send: SendFirst(dev.clone()),
                dtype,
                data: dev.upload(&data[..rows * cols * dtype.size()]),
                rows,
                cols,
            }
        }
        MatrixRef::Affine {
            bits,
            group_size,
            codes,
            scales,
            biases,
            scale_dtype,
            rows,
            cols,
        } => {
            if ![2, 3, 4, 5, 6, 8].contains(&bits) {
                return bad(format!("{bits}-bit codes are not supported"));
            }
            if group_size == 0 || group_size % 32 != 0 || cols % group_size != 0 {
                return bad(format!(
                    "group size {group_size} with {cols} columns (need multiples of 32)"
                ));
            }
            let code_bytes = rows * MatrixRef::affine_row_bytes(cols, bits);
            let sb = rows * (cols / group_size) * scale_dtype.size();
            if codes.len() < code_bytes || scales.len() < sb || biases.len() < sb {
                return bad(format!(
                    "{rows}×{cols} {bits}-bit: short codes, scales or biases"
                ));
            }
            let (codes, scales, biases) = (&codes[..code_bytes], &scales[..sb], &biases[..sb]);
            let tiled = bits == 4 && tensor_core_a4(group_size, cols);
            let upload = |data: &[u8], unit: usize| {
                if tiled {
                    dev.upload(&tile_major(data, rows, cols / group_size, unit))
                } else {
                    dev.upload(data)
                }
            };
            CudaMatrix::Affine {
                _send: SendFirst(dev.clone()),
                bits,
                group_size,
                codes: upload(codes, group_size / 2),
                scales: upload(scales, scale_dtype.size()),
                biases: upload(biases, scale_dtype.size()),
                scale_dtype,
                rows,
                cols,
                tiled,
            }
        }
    };
    crate::project::note_wgmma_prompt_matrix(dev, &matrix);
    Ok(matrix)
}

/// Groups of padding after a tile-major array: a streamed warp copies up to (stages − 1) × warps groups past its
/// last (8 stages and 16 warps at most; a test checks this against the kernels built).
const OVERRUN_GROUPS: usize = 7 * 16;

/// A row-major `[rows][groups][unit bytes]` array (4-bit codes: a group's bytes; scales, biases: one value)
/// in tile-major order, `[tiles of 16 rows][groups][16 rows][unit]`, the last tile padded with zeros: one
/// group of 16 outputs, what one warp of a tensor-core kernel reads, is then one contiguous run (common.cu
/// a4_tile_code says why). Then `OVERRUN_GROUPS` groups of zeros, which the weight stream's last copies may read
/// (project_stream.cu issues them without a branch; at most 7 stages ahead × 16 warps).
fn tile_major(src: &[u8], rows: usize, groups: usize, unit: usize) -> Vec<u8> {
    use rayon::prelude::*;
    let (row_bytes, tile_bytes) = (groups * unit, 16 * groups * unit);
    let tiled = rows.div_ceil(16) * tile_bytes;
    let mut dst = vec![0u8; tiled + OVERRUN_GROUPS * 16 * unit];
    // Tiles in parallel (a 27B checkpoint is ~14 GB of small copies): each tile's output is its own slice.
    dst[..tiled]
        .par_chunks_mut(tile_bytes)
        .enumerate()
        .for_each(|(tile, out)| {
            for r in 0..16.min(rows - tile * 16) {
                let row = &src[(tile * 16 + r) * row_bytes..][..row_bytes];
                for (g, part) in row.chunks_exact(unit).enumerate() {
                    out[(g * 16 + r) * unit..][..unit].copy_from_slice(part);
                }
            }
        });
    dst
}

impl CudaAct {
    pub(crate) fn from_buf(rows: usize, cols: usize, buf: Arc<Buf<f32>>) -> CudaAct {
        CudaAct {
            rows,
            cols,
            buf,
            prepared: OnceLock::new(),
        }
    }
}

pub(crate) fn new_act(dev: &Dev, rows: usize, cols: usize) -> CudaAct {
    CudaAct::from_buf(rows, cols, Arc::new(dev.scratch::<f32>(rows * cols)))
}

pub(crate) fn embed(dev: &Dev, table: &CudaMatrix, ids: &[u32]) -> CudaAct {
    let cols = table.cols();
    let out = new_act(dev, ids.len(), cols);
    if ids.is_empty() {
        return out;
    }
    dev.round_rows(ids.len());
    let dev_ids = dev.stage(ids);
    let (o, i) = (dev.ptr(&out.buf), dev.staged_ptr(&dev_ids));
    let grid = (ids.len() as u32, 1, 1);
    match table {
        CudaMatrix::Dense { dtype, data, .. } => dev.launch(
            &format!("embed_dense_{}", dtype_name(*dtype)),
            grid,
            THREADS,
            &[
                Arg::P(dev.ptr(data)),
                Arg::P(i),
                Arg::P(o),
                Arg::I(cols as i32),
            ],
        ),
        CudaMatrix::Affine {
            bits,
            group_size,
            codes,
            scales,
            biases,
            scale_dtype,
            tiled,
            ..
        } => dev.launch(
            &format!(
                "embed_affine_{bits}_{}{}",
                if *tiled { "tiled_" } else { "" },
                dtype_name(*scale_dtype)
            ),
            grid,
            THREADS,
            &[
                Arg::P(dev.ptr(codes)),
                Arg::P(dev.ptr(scales)),
                Arg::P(dev.ptr(biases)),
                Arg::P(i),
                Arg::P(o),
                Arg::I(cols as i32),
                Arg::I(*group_size as i32),
            ],
        ),
    }
    out
}

/// Threads of an RMSNorm block: wide rows get more (fewer dependent loads each); a choice by shape, so rows stay
/// invariant, and the same for rms_norm and add_rms_norm (their sums must match).
fn rms_norm_threads(cols: usize) -> u32 {
    if cols >= 4096 {
        1024
    } else {
        THREADS
    }
}

pub(crate) fn rms_norm(dev: &Dev, x: &CudaAct, w: &CudaVector, eps: f32) -> CudaAct {
    assert_eq!(
        x.cols, w.len,
        "rms_norm: {} columns, {} weights",
        x.cols, w.len
    );
    let inputs = [Arg::P(dev.ptr(&x.buf)), Arg::P(dev.ptr(&w.buf))];
    launch_norm(dev, "rms_norm", &inputs, x.rows, x.cols, eps)
}

/// Blocks a row of a norm of `rows` 1,024-thread rows takes: 1, or a cluster of 4 or 8 (rowwise.cu's `_c4` and `_c8`
/// kernels). The bits are the same either way.
/// - Calls of up to `TENSORFOLD_CUDA_NORM_CLUSTER` rows (0: never; else 64) take clusters. A prompt chunk's thousands
///   of rows fill the SMs with one block a row already. Calls 156–157 timed rounds of 1 and 16 rows, call 159 rounds
///   of 32 and 64 (27B MLX4 32-row rounds 1.2% faster on clusters, the rest within 0.3%).
/// - Clusters have 4 blocks, or `TENSORFOLD_CUDA_NORM_CLUSTER_SIZE=8`. Call 157 (an H100): both sizes took 16-row
///   27B MLX4 rounds from 12.6 to 12.2 ms, but clusters of 8 made 16-row 27B bf16 rounds 1% slower where 4 did not.
/// - The backend-ops test sets NORM_BLOCKS (1, 4 or 8) to run every kind whatever the row count.
fn norm_blocks(rows: usize) -> u32 {
    static ROWS: OnceLock<usize> = OnceLock::new();
    static SIZE: OnceLock<u32> = OnceLock::new();
    match NORM_BLOCKS.load(Ordering::Relaxed) {
        1 => 1,
        4 => 4,
        8 => 8,
        _ => {
            let max_rows = *ROWS.get_or_init(|| {
                crate::device::env_usize("TENSORFOLD_CUDA_NORM_CLUSTER").unwrap_or(64)
            });
            if rows > max_rows {
                return 1;
            }
            *SIZE.get_or_init(|| {
                match crate::device::env_usize("TENSORFOLD_CUDA_NORM_CLUSTER_SIZE") {
                    Some(8) => 8,
                    _ => 4,
                }
            })
        }
    }
}

/// Set by the backend-ops test to 1, 4 or 8 (0: unset, norm_blocks decides).
pub(crate) static NORM_BLOCKS: AtomicUsize = AtomicUsize::new(0);

/// Launches rms_norm or add_rms_norm (rowwise.cu) on `inputs` (their leading pointer arguments): one block per
/// row, the output and, when fused, its tensor-core form written by the kernel.
fn launch_norm(
    dev: &Dev,
    kernel: &str,
    inputs: &[Arg],
    rows: usize,
    cols: usize,
    eps: f32,
) -> CudaAct {
    let out = new_act(dev, rows, cols);
    let p = fuse_prepare(cols).then(|| alloc_prepared(dev, rows, cols));
    let mut args = inputs.to_vec();
    args.push(Arg::P(dev.ptr(&out.buf)));
    args.extend(prepared_args(dev, p.as_ref()));
    args.extend([Arg::I(cols as i32), Arg::F(eps), Arg::I(p.is_some() as i32)]);
    let threads = rms_norm_threads(cols);
    let cl = if threads == 1024 {
        norm_blocks(rows)
    } else {
        1
    };
    if cl > 1 {
        // The same bits on a cluster of blocks a row (rowwise.cu rms_row): a round's few rows no longer leave
        // all but a few SMs idle while one SM issues a whole row.
        let name = format!("{kernel}_c{cl}");
        dev.launch(&name, (rows as u32 * cl, 1, 1), threads / cl, &args);
    } else {
        dev.launch(kernel, (rows as u32, 1, 1), threads, &args);
    }
    if let Some(p) = p {
        let _ = out.prepared.set(p);
    }
    out
}

/// The four tensor-core-form outputs of a fused kernel (hi, lo, sums, and the wgmma B tiles or null when the rows
/// need none), or null pointers it never touches.
pub(crate) fn prepared_args(dev: &Dev, p: Option<&Prepared>) -> [Arg; 4] {
    match p {
        Some(p) => [
            Arg::P(dev.ptr(&p.hi)),
            Arg::P(dev.ptr(&p.lo)),
            Arg::P(dev.ptr(&p.sums)),
            Arg::P(p.b_tiles.as_ref().map_or(0, |t| dev.ptr(t))),
        ],
        None => [Arg::P(0), Arg::P(0), Arg::P(0), Arg::P(0)],
    }
}

fn elementwise_grid(n: usize) -> (u32, u32, u32) {
    (blocks(n, THREADS as usize).min(65_535), 1, 1)
}

/// Makes x's rows writable in place: drops its tensor-core form (the rows are about to change) and copies the
/// buffer when another holder (a pending round) shares it.
fn make_writable(dev: &Dev, x: &mut CudaAct) {
    x.prepared = OnceLock::new();
    if Arc::get_mut(&mut x.buf).is_none() {
        let n = x.rows * x.cols;
        let mut copy = dev.scratch::<f32>(n);
        dev.copy(&x.buf, &mut copy, n);
        x.buf = Arc::new(copy);
    }
}

/// x += y, then rms_norm of the new x, in one launch (add_rms_norm in rowwise.cu: the same bits as the two ops).
pub(crate) fn add_rms_norm(
    dev: &Dev,
    x: &mut CudaAct,
    y: &CudaAct,
    w: &CudaVector,
    eps: f32,
) -> CudaAct {
    assert_eq!(
        (x.rows, x.cols),
        (y.rows, y.cols),
        "add_rms_norm: shapes differ"
    );
    assert_eq!(
        x.cols, w.len,
        "add_rms_norm: {} columns, {} weights",
        x.cols, w.len
    );
    if !fusion_enabled() {
        add_assign(dev, x, y);
        return rms_norm(dev, x, w, eps);
    }
    make_writable(dev, x);
    let inputs = [
        Arg::P(dev.ptr(&x.buf)),
        Arg::P(dev.ptr(&y.buf)),
        Arg::P(dev.ptr(&w.buf)),
    ];
    launch_norm(dev, "add_rms_norm", &inputs, x.rows, x.cols, eps)
}

pub(crate) fn add_assign(dev: &Dev, x: &mut CudaAct, y: &CudaAct) {
    assert_eq!(
        (x.rows, x.cols),
        (y.rows, y.cols),
        "add_assign: shapes differ"
    );
    make_writable(dev, x);
    let n = x.rows * x.cols;
    dev.launch(
        "add_assign",
        elementwise_grid(n),
        THREADS,
        &[
            Arg::P(dev.ptr(&x.buf)),
            Arg::P(dev.ptr(&y.buf)),
            Arg::P(n as u64),
        ],
    );
}

pub(crate) fn swiglu(dev: &Dev, gate: &CudaAct, up: &CudaAct) -> CudaAct {
    assert_eq!(
        (gate.rows, gate.cols),
        (up.rows, up.cols),
        "swiglu: shapes differ"
    );
    let out = new_act(dev, gate.rows, gate.cols);
    let p = fuse_prepare(gate.cols).then(|| alloc_prepared(dev, gate.rows, gate.cols));
    let mut args = vec![
        Arg::P(dev.ptr(&gate.buf)),
        Arg::P(dev.ptr(&up.buf)),
        Arg::P(dev.ptr(&out.buf)),
    ];
    args.extend(prepared_args(dev, p.as_ref()));
    args.extend([
        Arg::I(gate.rows as i32),
        Arg::I(gate.cols as i32),
        Arg::I(p.is_some() as i32),
    ]);
    // Columns along x, rows along y (the kernel steps rows past the grid's 65,535), so each thread knows its
    // element's row and column without a division.
    let grid_rows = gate.rows.clamp(1, 65_535) as u32;
    dev.launch(
        "swiglu",
        (blocks(gate.cols, THREADS as usize), grid_rows, 1),
        THREADS,
        &args,
    );
    if let Some(p) = p {
        let _ = out.prepared.set(p);
    }
    out
}

pub(crate) fn select_rows(dev: &Dev, x: &CudaAct, rows: &[usize]) -> CudaAct {
    let out = new_act(dev, rows.len(), x.cols);
    if let Some(&bad) = rows.iter().find(|&&r| r >= x.rows) {
        panic!("select_rows: row {bad} of {}", x.rows);
    }
    let idx: Vec<i32> = rows.iter().map(|&r| r as i32).collect();
    let idx = dev.i32s(&idx);
    dev.launch(
        "gather_rows",
        (rows.len() as u32, 1, 1),
        THREADS,
        &[
            Arg::P(dev.ptr(&x.buf)),
            Arg::P(dev.ptr(&*idx)),
            Arg::P(dev.ptr(&out.buf)),
            Arg::I(x.cols as i32),
        ],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::{tile_major, OVERRUN_GROUPS};
    use crate::device::kernel_names;

    #[test]
    fn the_padding_after_tile_major_arrays_covers_every_streamed_kernels_overrun() {
        // Stream kernels are named …_s{stages}_m{tiles}[_w{warps}]; each warp runs stages − 1 copies ahead, 16
        // warps at most.
        let stages: Vec<usize> = kernel_names()
            .iter()
            .filter(|n| n.starts_with("project_stream_"))
            .map(|n| {
                n.split('_')
                    .find_map(|p| p.strip_prefix('s').and_then(|s| s.parse().ok()))
                    .expect("an _s{stages} part")
            })
            .collect();
        assert!(!stages.is_empty());
        for s in stages {
            assert!(
                (s - 1) * 16 <= OVERRUN_GROUPS,
                "{s} stages overrun the padding"
            );
        }
    }

    #[test]
    fn tile_major_puts_each_group_of_16_rows_in_one_run_and_pads_with_zeros() {
        let (rows, groups, unit) = (20usize, 3usize, 2usize);
        // Byte b of row o, group g: a value that names all three (never 0).
        let val = |o: usize, g: usize, b: usize| (1 + o * 7 + g * 3 + b) as u8;
        let src: Vec<u8> = (0..rows)
            .flat_map(|o| (0..groups).flat_map(move |g| (0..unit).map(move |b| val(o, g, b))))
            .collect();
        let dst = tile_major(&src, rows, groups, unit);
        assert_eq!(dst.len(), 32 * groups * unit + 7 * 16 * 16 * unit);
        assert!(
            dst[32 * groups * unit..].iter().all(|&b| b == 0),
            "the overrun tail is zeros"
        );
        for tile in 0..2 {
            for g in 0..groups {
                for r in 0..16 {
                    let o = tile * 16 + r;
                    for b in 0..unit {
                        let want = if o < rows { val(o, g, b) } else { 0 };
                        assert_eq!(
                            dst[((tile * groups + g) * 16 + r) * unit + b],
                            want,
                            "row {o} group {g}"
                        );
                    }
                }
            }
        }
    }
}
