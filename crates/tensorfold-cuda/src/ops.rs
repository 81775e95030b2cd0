//! The row-wise ops on the device: weights uploaded in their stored format, embedding, RMSNorm, projection
//! (one warp per output feature and row tile: a fixed per-lane order and butterfly, so rows never mix), residual
//! add, SwiGLU and row gathers.

use crate::device::{ok, Arg, Dev};
use cudarc::driver::CudaSlice;
use std::sync::{Arc, OnceLock};
use tensorfold_core::{CoreError, DenseDType, MatrixRef, Result, StoredMatrix};

/// Row-major f32 activations `[rows, cols]` on the device (shared, so a round's pending rows can keep them).
pub struct CudaAct {
    pub rows: usize,
    pub cols: usize,
    pub(crate) buf: Arc<CudaSlice<f32>>,
    /// The tensor-core form of these rows, made by the first projection that needs it (q, k, v and the MLP's
    /// gate and up read the same rows).
    prepared: OnceLock<Prepared>,
}

/// x as bf16 hi + lo in the pair order of project_mma.cu, and its f32 sums over every 32 columns.
struct Prepared {
    hi: CudaSlice<u16>,
    lo: CudaSlice<u16>,
    sums: CudaSlice<f32>,
}

/// A small f32 parameter vector on the device.
pub struct CudaVector {
    pub(crate) buf: CudaSlice<f32>,
    pub len: usize,
}

/// A weight matrix on the device in its checkpoint format.
pub enum CudaMatrix {
    Dense {
        dtype: DenseDType,
        data: CudaSlice<u8>,
        rows: usize,
        cols: usize,
    },
    Affine {
        bits: u32,
        group_size: usize,
        codes: CudaSlice<u8>,
        scales: CudaSlice<u8>,
        biases: CudaSlice<u8>,
        scale_dtype: DenseDType,
        rows: usize,
        cols: usize,
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

fn dtype_name(d: DenseDType) -> &'static str {
    match d {
        DenseDType::F32 => "f32",
        DenseDType::F16 => "f16",
        DenseDType::BF16 => "bf16",
    }
}

fn blocks(n: usize, per: usize) -> u32 {
    n.div_ceil(per) as u32
}

/// Threads per block of the row-wise kernels.
const THREADS: u32 = 256;
/// Warps per projection block (PW in project.cu), output features per warp (OPW) and rows per tile (RT).
const PW: usize = 4;
const OPW: usize = 4;
const RT: usize = 8;

pub(crate) fn upload_matrix(dev: &Dev, m: &StoredMatrix) -> Result<CudaMatrix> {
    let bad = |msg: String| Err(CoreError::Invalid(format!("CUDA matrix: {msg}")));
    match m.view() {
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
            Ok(CudaMatrix::Dense {
                dtype,
                data: dev.upload(&data[..rows * cols * dtype.size()]),
                rows,
                cols,
            })
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
            Ok(CudaMatrix::Affine {
                bits,
                group_size,
                codes: dev.upload(&codes[..code_bytes]),
                scales: dev.upload(&scales[..sb]),
                biases: dev.upload(&biases[..sb]),
                scale_dtype,
                rows,
                cols,
            })
        }
    }
}

impl CudaAct {
    pub(crate) fn from_buf(rows: usize, cols: usize, buf: Arc<CudaSlice<f32>>) -> CudaAct {
        CudaAct {
            rows,
            cols,
            buf,
            prepared: OnceLock::new(),
        }
    }
}

pub(crate) fn new_act(dev: &Dev, rows: usize, cols: usize) -> CudaAct {
    CudaAct::from_buf(rows, cols, Arc::new(dev.alloc::<f32>(rows * cols)))
}

pub(crate) fn embed(dev: &Dev, table: &CudaMatrix, ids: &[u32]) -> CudaAct {
    let cols = table.cols();
    let out = new_act(dev, ids.len(), cols);
    if ids.is_empty() {
        return out;
    }
    let dev_ids = dev.upload(ids);
    let (o, i) = (dev.ptr(&out.buf), dev.ptr(&dev_ids));
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
            ..
        } => dev.launch(
            &format!("embed_affine_{bits}_{}", dtype_name(*scale_dtype)),
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

pub(crate) fn project(dev: &Dev, x: &CudaAct, w: &CudaMatrix) -> CudaAct {
    project_staged(dev, x, w, mma_layout().0)
}

/// `project` with the 4-bit pipeline depth given (the self-test compares depths bit for bit).
pub(crate) fn project_staged(dev: &Dev, x: &CudaAct, w: &CudaMatrix, stages: usize) -> CudaAct {
    assert_eq!(
        x.cols,
        w.cols(),
        "project: x has {} columns, W has {}",
        x.cols,
        w.cols()
    );
    let (rows, out_f, cols) = (x.rows, w.rows(), w.cols());
    if let Some(kernel) = mma_kernel(w) {
        return project_mma(dev, x, w, &kernel, stages);
    }
    let y = new_act(dev, rows, out_f);
    let grid = (blocks(out_f, PW * OPW) * blocks(rows, RT), 1, 1);
    let (xp, yp) = (dev.ptr(&x.buf), dev.ptr(&y.buf));
    let shape = [
        Arg::I(rows as i32),
        Arg::I(out_f as i32),
        Arg::I(cols as i32),
    ];
    match w {
        CudaMatrix::Dense { dtype, data, .. } => {
            let mut args = vec![Arg::P(xp), Arg::P(dev.ptr(data)), Arg::P(yp)];
            args.extend(shape);
            dev.launch(
                &format!("project_dense_{}", dtype_name(*dtype)),
                grid,
                (PW * 32) as u32,
                &args,
            );
        }
        CudaMatrix::Affine {
            bits,
            group_size,
            codes,
            scales,
            biases,
            scale_dtype,
            ..
        } => {
            let mut args = vec![
                Arg::P(xp),
                Arg::P(dev.ptr(codes)),
                Arg::P(dev.ptr(scales)),
                Arg::P(dev.ptr(biases)),
                Arg::P(yp),
            ];
            args.extend(shape);
            args.push(Arg::I(*group_size as i32));
            dev.launch(
                &format!("project_affine_{bits}_{}", dtype_name(*scale_dtype)),
                grid,
                (PW * 32) as u32,
                &args,
            );
        }
    }
    y
}

/// Whether the tensor-core kernels (project_mma.cu) may run: on unless `TENSORFOLD_CUDA_MMA=0` (for before/after
/// measurements in one run).
fn mma_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_MMA").map_or(true, |v| v != "0"))
}

/// How the tensor-core projections are laid out, fixed for the process (every path of a run uses the same, so
/// exactness holds whichever is chosen): the 4-bit weight stream (`TENSORFOLD_CUDA_MMA_STAGES`: 0 = project_mma.cu's
/// direct loads; 4 or 8 = project_stream.cu with that many stages of one 16-output tile per block; 2 = 4 stages of
/// two tiles per block; groups of 128 always get 4 stages of one tile) and the most warps a block splits the
/// columns over (`TENSORFOLD_CUDA_MMA_WARPS`, 1..=16 direct, 1..=8 streamed). All give the same bits for the same
/// warps. The defaults are the fastest measured on the H200 (BENCHMARKS.md §7).
fn mma_layout() -> (usize, usize) {
    static LAYOUT: OnceLock<(usize, usize)> = OnceLock::new();
    *LAYOUT.get_or_init(|| {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
        };
        let stages = match var("TENSORFOLD_CUDA_MMA_STAGES") {
            Some(0) => 0,
            Some(8) => 8,
            Some(2) => 2,
            _ => 4,
        };
        let warps = var("TENSORFOLD_CUDA_MMA_WARPS").unwrap_or(8).clamp(1, 16);
        (stages, warps)
    })
}

/// The tensor-core kernel family of a matrix (name without the tile suffix), for bf16 weights with columns in
/// whole 64s and MLX 4-bit codes in groups of 32, 64 or 128; `None` keeps the CUDA-core kernels. The choice
/// depends on the matrix alone, never on the rows of a call, so a row's bits do not depend on its round.
fn mma_kernel(w: &CudaMatrix) -> Option<String> {
    if !mma_enabled() {
        return None;
    }
    match w {
        CudaMatrix::Dense {
            dtype: DenseDType::BF16,
            cols,
            ..
        } if cols % 64 == 0 => Some("project_mma_bf16".into()),
        CudaMatrix::Affine {
            bits: 4,
            group_size,
            scale_dtype,
            cols,
            ..
        } if matches!(group_size, 32 | 64 | 128) && cols % group_size == 0 => Some(format!(
            "project_mma_a4_g{}_{}",
            group_size / 32,
            dtype_name(*scale_dtype)
        )),
        _ => None,
    }
}

/// Column groups of a tensor-core projection (the unit its warps split).
fn mma_groups(w: &CudaMatrix) -> usize {
    match w {
        CudaMatrix::Affine {
            group_size, cols, ..
        } => cols / group_size,
        CudaMatrix::Dense { cols, .. } => cols / 64,
    }
}

fn alloc_prepared(dev: &Dev, n: usize) -> Prepared {
    Prepared {
        hi: dev.alloc::<u16>(n),
        lo: dev.alloc::<u16>(n),
        sums: dev.alloc::<f32>(n / 32),
    }
}

/// Whether the producer of an activation with `cols` columns should write its tensor-core form as it goes
/// (rms_norm_prep, swiglu_prep): the bits are prepare_x's, one launch fewer per projected activation.
/// `TENSORFOLD_CUDA_FUSE_PREPARE=0` turns it off (for before/after measurements in one run).
fn fuse_prepare(cols: usize) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON
        .get_or_init(|| std::env::var("TENSORFOLD_CUDA_FUSE_PREPARE").map_or(true, |v| v != "0"));
    on && mma_enabled() && cols % 32 == 0
}

fn prepared<'a>(dev: &Dev, x: &'a CudaAct) -> &'a Prepared {
    x.prepared.get_or_init(|| {
        let n = x.rows * x.cols;
        let p = alloc_prepared(dev, n);
        dev.launch(
            "prepare_x",
            (blocks(n, THREADS as usize), 1, 1),
            THREADS,
            &[
                Arg::P(dev.ptr(&x.buf)),
                Arg::P(dev.ptr(&p.hi)),
                Arg::P(dev.ptr(&p.lo)),
                Arg::P(dev.ptr(&p.sums)),
                Arg::I(x.rows as i32),
                Arg::I(x.cols as i32),
            ],
        );
        p
    })
}

/// y = x Wᵀ on tensor cores: 16 output features per block, its warps splitting the column groups (a number set
/// by the shape alone), 1, 2 or 4 tiles of 8 rows per block by the row count (the same per-tile code).
fn project_mma(dev: &Dev, x: &CudaAct, w: &CudaMatrix, kernel: &str, stages: usize) -> CudaAct {
    let (rows, out_f, cols) = (x.rows, w.rows(), w.cols());
    let y = new_act(dev, rows, out_f);
    let p = prepared(dev, x);
    let nt = match rows {
        0..=8 => 1,
        9..=16 => 2,
        _ => 4,
    };
    // Enough warps that a decode projection has many groups in flight; a shape-only choice (see mma_kernel).
    let max_warps = mma_layout().1;
    let streamed = stages > 0 && matches!(w, CudaMatrix::Affine { .. });
    let max_warps = if streamed {
        max_warps.min(8)
    } else {
        max_warps
    };
    let warps = (mma_groups(w) / 4).clamp(1, max_warps);
    let mut args = vec![Arg::P(dev.ptr(&p.hi)), Arg::P(dev.ptr(&p.lo))];
    match w {
        CudaMatrix::Dense { data, .. } => args.push(Arg::P(dev.ptr(data))),
        CudaMatrix::Affine {
            codes,
            scales,
            biases,
            ..
        } => args.extend([
            Arg::P(dev.ptr(&p.sums)),
            Arg::P(dev.ptr(codes)),
            Arg::P(dev.ptr(scales)),
            Arg::P(dev.ptr(biases)),
        ]),
    }
    args.extend([
        Arg::P(dev.ptr(&y.buf)),
        Arg::I(rows as i32),
        Arg::I(out_f as i32),
        Arg::I(cols as i32),
    ]);
    // Streamed: (stages, output tiles per block); groups of 128 only fit 4 stages of one tile.
    let (stages, tiles) = match (stages, w) {
        (
            _,
            CudaMatrix::Affine {
                group_size: 128, ..
            },
        ) => (4, 1),
        (2, _) => (4, 2),
        (s, _) => (s, 1),
    };
    let name = if streamed {
        format!(
            "{}_nt{nt}_s{stages}_m{tiles}",
            kernel.replace("project_mma", "project_stream")
        )
    } else {
        format!("{kernel}_nt{nt}")
    };
    let tiles = if streamed { tiles } else { 1 };
    let grid = (blocks(out_f, 16 * tiles), blocks(rows, 8 * nt), 1);
    // Profiled per shape, so the profile gives each matrix's bandwidth.
    let label = dev
        .profile
        .enabled
        .then(|| format!("{name} {out_f}x{cols}"));
    dev.launch_as(&name, label.as_deref(), grid, (warps * 32) as u32, &args);
    y
}

pub(crate) fn rms_norm(dev: &Dev, x: &CudaAct, w: &CudaVector, eps: f32) -> CudaAct {
    assert_eq!(
        x.cols, w.len,
        "rms_norm: {} columns, {} weights",
        x.cols, w.len
    );
    let y = new_act(dev, x.rows, x.cols);
    // Wide rows get more threads (fewer dependent loads each); a choice by shape, so rows stay invariant.
    let threads = if x.cols >= 4096 { 1024 } else { THREADS };
    if fuse_prepare(x.cols) {
        let p = alloc_prepared(dev, x.rows * x.cols);
        dev.launch(
            "rms_norm_prep",
            (x.rows as u32, 1, 1),
            threads,
            &[
                Arg::P(dev.ptr(&x.buf)),
                Arg::P(dev.ptr(&w.buf)),
                Arg::P(dev.ptr(&y.buf)),
                Arg::P(dev.ptr(&p.hi)),
                Arg::P(dev.ptr(&p.lo)),
                Arg::P(dev.ptr(&p.sums)),
                Arg::I(x.cols as i32),
                Arg::F(eps),
            ],
        );
        let _ = y.prepared.set(p);
        return y;
    }
    dev.launch(
        "rms_norm",
        (x.rows as u32, 1, 1),
        threads,
        &[
            Arg::P(dev.ptr(&x.buf)),
            Arg::P(dev.ptr(&w.buf)),
            Arg::P(dev.ptr(&y.buf)),
            Arg::I(x.cols as i32),
            Arg::F(eps),
        ],
    );
    y
}

fn elementwise_grid(n: usize) -> (u32, u32, u32) {
    (blocks(n, THREADS as usize).min(65_535), 1, 1)
}

pub(crate) fn add_assign(dev: &Dev, x: &mut CudaAct, y: &CudaAct) {
    assert_eq!(
        (x.rows, x.cols),
        (y.rows, y.cols),
        "add_assign: shapes differ"
    );
    // The rows change: a tensor-core form made earlier no longer matches them.
    x.prepared = OnceLock::new();
    if Arc::get_mut(&mut x.buf).is_none() {
        // Another holder (a pending round) shares this buffer: write to a copy.
        x.buf = Arc::new(ok(dev.stream.clone_dtod(&*x.buf), "copy on write"));
    }
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
    let n = gate.rows * gate.cols;
    if fuse_prepare(gate.cols) {
        let p = alloc_prepared(dev, n);
        dev.launch(
            "swiglu_prep",
            (blocks(n, THREADS as usize), 1, 1),
            THREADS,
            &[
                Arg::P(dev.ptr(&gate.buf)),
                Arg::P(dev.ptr(&up.buf)),
                Arg::P(dev.ptr(&out.buf)),
                Arg::P(dev.ptr(&p.hi)),
                Arg::P(dev.ptr(&p.lo)),
                Arg::P(dev.ptr(&p.sums)),
                Arg::P(n as u64),
            ],
        );
        let _ = out.prepared.set(p);
        return out;
    }
    dev.launch(
        "swiglu",
        elementwise_grid(n),
        THREADS,
        &[
            Arg::P(dev.ptr(&gate.buf)),
            Arg::P(dev.ptr(&up.buf)),
            Arg::P(dev.ptr(&out.buf)),
            Arg::P(n as u64),
        ],
    );
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
