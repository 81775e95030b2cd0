//! Projections y = x Wᵀ on the device: the tensor-core kernels (project_mma.cu, project_stream.cu; project_gemm.cu
//! for prompt rows, with their bits) for bf16 and MLX 4-bit weights, chosen by the matrix alone, and the
//! CUDA-core kernels (project.cu) for every other format.

use crate::device::{Arg, Dev};
use crate::ops::{
    blocks, dtype_name, new_act, CudaAct, CudaMatrix, Prepared, OPW, PW, RT, THREADS,
};
use std::sync::OnceLock;
use tensorfold_core::DenseDType;

#[path = "project_gemm.rs"]
mod gemm;
#[path = "project_many.rs"]
mod many;
#[path = "project_wgmma.rs"]
mod wgmma;
use gemm::{gemm_for, gemm_kernel, project_gemm};
pub(crate) use gemm::{
    gemm_tiles_first, note_wgmma_prompt_matrix, project_wgmma_prompt, wgmma_prompt_expected,
};
pub(crate) use many::{many_rows, project_many};
pub(crate) use wgmma::{bf16_stages, wgmma_switch, BF16_STAGES, WGMMA_TICKETS, WHOLE_LAUNCHES};
use wgmma::{project_wgmma, wgmma_kernel};

/// Whether a call of `rows` rows of `w` takes a wgmma kernel (and so, in project_many, does every matrix sharing
/// its input).
pub(crate) fn takes_wgmma(dev: &Dev, w: &CudaMatrix, rows: usize) -> bool {
    mma_kernel(w).is_some_and(|k| wgmma_kernel(dev, &k, rows, w.rows()).is_some())
}

pub(crate) fn project(dev: &Dev, x: &CudaAct, w: &CudaMatrix) -> CudaAct {
    project_staged(dev, x, w, mma_layout().0)
}

/// `project` with the 4-bit pipeline depth given (the self-test compares depths bit for bit).
pub(crate) fn project_staged(dev: &Dev, x: &CudaAct, w: &CudaMatrix, stages: usize) -> CudaAct {
    project_layout(dev, x, w, stages, gemm_for(x.rows))
}

/// `project` with the 4-bit pipeline depth and the kernel family (`gemm`: the prompt kernel, else the decode
/// kernels, at any row count) given: every choice gives the same bits (the self-test checks each).
pub(crate) fn project_layout(
    dev: &Dev,
    x: &CudaAct,
    w: &CudaMatrix,
    stages: usize,
    gemm: bool,
) -> CudaAct {
    assert_eq!(
        x.cols,
        w.cols(),
        "project: x has {} columns, W has {}",
        x.cols,
        w.cols()
    );
    let (rows, out_f, cols) = (x.rows, w.rows(), w.cols());
    if let Some(kernel) = mma_kernel(w) {
        if let Some(name) = gemm_kernel(&kernel).filter(|_| gemm) {
            return project_gemm(dev, x, w, &name);
        }
        if let Some(name) = wgmma_kernel(dev, &kernel, rows, out_f) {
            return project_wgmma(dev, x, &[w], &name).remove(0);
        }
        return project_mma(dev, x, &[w], &kernel, stages).remove(0);
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
            tiled,
            ..
        } => {
            // Tiled matrices are exactly those mma_kernel takes, so they never reach the CUDA-core kernels.
            assert!(!tiled, "project: a tile-major matrix on the CUDA-core path");
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

/// Whether MLX 4-bit codes in groups of `group_size` over `cols` columns take the tensor-core kernels (groups of
/// 32, 64 or 128): those matrices are uploaded tile-major (ops.rs tile_major).
pub(crate) fn tensor_core_a4(group_size: usize, cols: usize) -> bool {
    mma_enabled() && matches!(group_size, 32 | 64 | 128) && cols.is_multiple_of(group_size)
}

/// The default stream layout (see mma_layout).
pub(crate) const STREAM_AUTO: usize = 1;

/// How the tensor-core projections are laid out, fixed for the process.
/// - The 4-bit weight stream (`TENSORFOLD_CUDA_MMA_STAGES`): 0 = project_mma.cu's direct loads; 4 or 8 =
///   project_stream.cu with that many stages of one 16-output tile per block; 2 = 4 stages of two tiles per
///   block; unset = `STREAM_AUTO`, 4 stages of one tile for calls of up to 8 rows and of two tiles above (groups
///   of 128 always get 4 stages of one tile). Stages and tiles only move bytes: every layout gives the direct
///   kernel's bits for the same warps (the self-test checks each), so even choosing them by the row count keeps
///   a row's bits independent of its round.
/// - The most warps a block of a matrix with more outputs than `TENSORFOLD_CUDA_MMA_WIDE` (default 0) splits
///   the columns over (`TENSORFOLD_CUDA_MMA_WARPS`, 1..=16, default 8; smaller matrices take up to 16). The
///   warps change the bits, so they depend on the matrix alone.
///
/// - The most row tiles a block takes (`TENSORFOLD_CUDA_MMA_NT`: 1, 2 or 4; unset: 2 up to 16 rows and 4 above,
///   while 4 takes 4 from 9 rows); more rows take more blocks. Each row tile runs the same code, so the bits do
///   not depend on it.
///
/// The defaults are the fastest measured on the H200 (BENCHMARKS.md §7).
fn mma_layout() -> (usize, usize, usize, Option<usize>) {
    static LAYOUT: OnceLock<(usize, usize, usize, Option<usize>)> = OnceLock::new();
    *LAYOUT.get_or_init(|| {
        let var = crate::device::env_usize;
        let stages = match var("TENSORFOLD_CUDA_MMA_STAGES") {
            Some(s @ (0 | 2 | 4 | 8)) => s,
            _ => STREAM_AUTO,
        };
        let warps = var("TENSORFOLD_CUDA_MMA_WARPS").unwrap_or(8).clamp(1, 16);
        let wide = var("TENSORFOLD_CUDA_MMA_WIDE").unwrap_or(0);
        let nt = var("TENSORFOLD_CUDA_MMA_NT").filter(|n| matches!(n, 1 | 2 | 4));
        (stages, warps, wide, nt)
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
            tiled: true,
            group_size,
            scale_dtype,
            ..
        } => Some(format!(
            "project_mma_a4_g{}_{}",
            group_size / 32,
            dtype_name(*scale_dtype)
        )),
        _ => None,
    }
}

/// The decode kernels' warps per block for a matrix: how many ways its column groups are split (a number of the
/// shape alone): a quarter of its groups, at most `TENSORFOLD_CUDA_MMA_WARPS` (default 8; 16 for matrices of at
/// most `TENSORFOLD_CUDA_MMA_WIDE` outputs, default 0). Matrices sharing an input then take the same warps and
/// share one launch (project_many). Nsight Compute (call 26) found a 1-row 27B down projection (320 blocks of 8 warps)
/// waiting on memory at 19 warps an SM; 16 warps for matrices of up to 8192 outputs was slower still (call 27).
/// Matrices of up to 1024 outputs took 16 warps until small ones shared the launches of large ones.
fn mma_warps(w: &CudaMatrix) -> usize {
    let (_, warps, wide, _) = mma_layout();
    let max_warps = if w.rows() <= wide { 16 } else { warps };
    (mma_groups(w) / 4).clamp(1, max_warps)
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

/// Most warps a streamed block of `wpl` words per lane, `stages` stages and `tiles` output tiles holds:
/// project_stream.cu's stream_warps (16 when the stages fit 47 KB of shared memory, else 8).
fn stream_max_warps(wpl: usize, stages: usize, tiles: usize) -> usize {
    let stage_bytes = tiles * (256 * wpl + 128);
    if 16 * stages * stage_bytes <= 47 * 1024 {
        16
    } else {
        8
    }
}

/// Room for the tensor-core form of `rows` × `cols` values, and for their wgmma B tiles when a round of that many
/// rows takes the wgmma kernel (wgmma::takes_b_tiles): whoever writes the form writes the tiles beside it.
pub(crate) fn alloc_prepared(dev: &Dev, rows: usize, cols: usize) -> Prepared {
    let n = rows * cols;
    let b_tiles = wgmma::takes_b_tiles(dev, rows, cols)
        .then(|| dev.scratch::<u32>(wgmma::b_tile_words(rows, cols)));
    Prepared {
        hi: dev.scratch::<u16>(n),
        lo: dev.scratch::<u16>(n),
        sums: dev.scratch::<f32>(n / 32),
        b_tiles,
    }
}

/// Whether fused kernels may stand in for chains of ops (norms and SwiGLU writing their output's tensor-core form,
/// add_rms_norm): the same bits,
/// fewer launches. `TENSORFOLD_CUDA_FUSE=0` turns them off (for before/after measurements in one run).
pub(crate) fn fusion_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_FUSE").map_or(true, |v| v != "0"))
}

/// Whether the producer of an activation with `cols` columns should write its tensor-core form as it goes
/// (rms_norm, add_rms_norm, swiglu): the bits are prepare_x's, one launch fewer per projected input.
pub(crate) fn fuse_prepare(cols: usize) -> bool {
    fusion_enabled() && mma_enabled() && cols.is_multiple_of(32)
}

pub(super) fn prepared<'a>(dev: &Dev, x: &'a CudaAct) -> &'a Prepared {
    x.prepared.get_or_init(|| {
        let n = x.rows * x.cols;
        let p = alloc_prepared(dev, x.rows, x.cols);
        let mut args = vec![Arg::P(dev.ptr(&x.buf))];
        args.extend(crate::ops::prepared_args(dev, Some(&p)));
        args.extend([Arg::I(x.rows as i32), Arg::I(x.cols as i32)]);
        dev.launch(
            "prepare_x",
            (blocks(n, THREADS as usize), 1, 1),
            THREADS,
            &args,
        );
        p
    })
}

/// How a tensor-core projection of a call's rows is launched: the kernel, its grid and warps, and whether it is a
/// streamed kernel (project_stream.cu, which can also take a pair of matrices in one launch).
struct MmaPlan {
    name: String,
    /// Blocks along the outputs (tiles of 16·MT outputs) and along the rows (blocks of NT row tiles).
    tiles: u32,
    row_blocks: u32,
    warps: usize,
    streamed: bool,
}

/// Most 16-output tiles one launch may have: they are its grid's y (mma_grid).
const MAX_TILES: u32 = 65_535;

/// Most outputs a matrix may have (MAX_TILES tiles of 16), checked at upload.
pub(crate) const MAX_OUTPUTS: usize = MAX_TILES as usize * 16;

/// The grid of a tensor-core launch: row blocks inner, so the row blocks of one output tile run side by side and
/// read its weights once (project_mma.cu tile_block); tiles inner with `TENSORFOLD_CUDA_ROWS_APART=1`. Matrices
/// are checked at upload and shared launches kept within the limit (project_mma), so the assert never fires.
fn mma_grid(tiles: u32, row_blocks: u32) -> (u32, u32, u32) {
    if rows_apart() {
        (tiles, row_blocks, 1)
    } else {
        assert!(
            tiles <= MAX_TILES,
            "a tensor-core launch of {tiles} output tiles (at most {MAX_TILES} with the row blocks inner)"
        );
        (row_blocks, tiles, 1)
    }
}

/// Whether tensor-core launches put the row blocks of a tile apart (tiles inner, the layout before they were put
/// side by side): `TENSORFOLD_CUDA_ROWS_APART=1`, for same-run comparisons; the kernels then get TF_ROWS_APART
/// (nvrtc.rs). Every block computes the same either way, so the bits are the same.
pub(crate) fn rows_apart() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_ROWS_APART").is_ok_and(|v| v == "1"))
}

/// x rows per n-tile of the tensor-core kernels (project_mma.cu TILE_ROWS: each row takes two of the mma's 8
/// columns, its hi and its lo).
const TILE_ROWS: usize = 4;

/// 16 output features per block, its warps splitting the column groups (a number set by the shape alone), 1, 2
/// or 4 tiles of TILE_ROWS rows per block by the row count (the same per-tile code). Up to 16 rows take 2 tiles a
/// block and a second block row above 8 rows: 16-row rounds of the 27B MLX4 shape took 15.8 ms so, against 16.5
/// with 4 tiles (call 48), whose 128 registers a thread allow 2 blocks an SM; larger rounds take 4.
fn mma_plan(rows: usize, w: &CudaMatrix, kernel: &str, stages: usize) -> MmaPlan {
    let out_f = w.rows();
    let nt = row_tiles(rows, mma_layout().3);
    let warps = mma_warps(w);
    // Streamed: (stages, output tiles per block); groups of 128 only fit 4 stages of one tile. A layout whose
    // stages do not fit this many warps leaves the matrix to the direct kernel (the same bits).
    let (stages, mut tiles) = match (stages, w) {
        (0, _) => (0, 1),
        (_, CudaMatrix::Affine { group_size, .. }) if *group_size == 128 => (4, 1),
        (STREAM_AUTO, _) if rows <= 8 => (4, 1),
        (STREAM_AUTO, _) => (4, 2),
        (2, _) => (4, 2),
        (s, _) => (s, 1),
    };
    let streamed = match w {
        CudaMatrix::Affine { group_size, .. } if stages > 0 => {
            let wpl = group_size / 32;
            // Two tiles' stages of a matrix split over 16 warps (few outputs) do not fit: one tile does, and
            // streams where the direct kernel waited a memory latency per group (the same bits either way).
            if tiles > 1 && warps > stream_max_warps(wpl, stages, tiles) {
                tiles = 1;
            }
            warps <= stream_max_warps(wpl, stages, tiles)
        }
        _ => false,
    };
    let name = if streamed {
        let fixed = match w {
            CudaMatrix::Affine { group_size, .. } => {
                stream_fixed_warps(*group_size, stages, tiles, warps)
            }
            _ => "",
        };
        format!(
            "{}_nt{nt}_s{stages}_m{tiles}{fixed}",
            kernel.replace("project_mma", "project_stream")
        )
    } else {
        format!("{kernel}_nt{nt}")
    };
    let tiles = if streamed { tiles } else { 1 };
    MmaPlan {
        name,
        tiles: blocks(out_f, 16 * tiles),
        row_blocks: blocks(rows, TILE_ROWS * nt),
        warps,
        streamed,
    }
}

/// The name suffix of the weight-stream kernel built for exactly `warps` warps (project_stream.cu's `_w8`: groups of
/// 64, 4 stages, one output tile a block, 8 warps: every large matrix of the published shapes in calls of up to 8
/// rows), or "" for the kernel that reads its warps at run time. The same arithmetic either way (the self-test
/// compares them bit for bit); `TENSORFOLD_CUDA_FIXED_WARPS=0` keeps the run-time kernel, for same-run comparisons.
fn stream_fixed_warps(
    group_size: usize,
    stages: usize,
    tiles: usize,
    warps: usize,
) -> &'static str {
    static ON: OnceLock<bool> = OnceLock::new();
    let on =
        *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_FIXED_WARPS").map_or(true, |v| v != "0"));
    if on && group_size == 64 && stages == 4 && tiles == 1 && warps == 8 {
        "_w8"
    } else {
        ""
    }
}

/// Row tiles a block of a call of `rows` rows takes (see mma_plan), at most `most` when set.
fn row_tiles(rows: usize, most: Option<usize>) -> usize {
    match rows.div_ceil(TILE_ROWS) {
        0..=1 => 1,
        2 => 2,
        3..=4 if most != Some(4) => 2,
        _ => 4,
    }
    .min(most.unwrap_or(4))
}

/// The weight arguments of a tensor-core kernel (codes, scales, biases of 4-bit weights; the data of bf16 ones).
fn weight_args(dev: &Dev, w: &CudaMatrix) -> Vec<Arg> {
    match w {
        CudaMatrix::Dense { data, .. } => vec![Arg::P(dev.ptr(data))],
        CudaMatrix::Affine {
            codes,
            scales,
            biases,
            ..
        } => vec![
            Arg::P(dev.ptr(codes)),
            Arg::P(dev.ptr(scales)),
            Arg::P(dev.ptr(biases)),
        ],
    }
}

/// The leading arguments of every tensor-core kernel: x's tensor-core form (hi, lo, and for 4-bit weights its
/// group sums), the weights, then y.
fn tensor_core_args(dev: &Dev, x: &CudaAct, w: &CudaMatrix, y: &CudaAct) -> Vec<Arg> {
    let p = prepared(dev, x);
    let mut args = vec![Arg::P(dev.ptr(&p.hi)), Arg::P(dev.ptr(&p.lo))];
    if matches!(w, CudaMatrix::Affine { .. }) {
        args.push(Arg::P(dev.ptr(&p.sums)));
    }
    args.extend(weight_args(dev, w));
    args.push(Arg::P(dev.ptr(&y.buf)));
    args
}

/// How a kernel of the families that walk the decode kernels' warp split themselves (the prompt kernels) is
/// launched: `grid` blocks of `threads` threads with `smem` bytes of dynamic shared memory, and the arguments after
/// the common ones.
struct SplitWalk<'a> {
    grid: (u32, u32, u32),
    threads: u32,
    smem: u32,
    extra: &'a [Arg],
}

/// Launches kernel `name` of the families that walk the decode kernels' warp split themselves (x's tensor-core
/// form, the weights, y, then rows, outputs, columns and mma_warps, then `l.extra`) and returns y.
fn launch_split_walk(dev: &Dev, x: &CudaAct, w: &CudaMatrix, name: &str, l: SplitWalk) -> CudaAct {
    let (rows, out_f, cols) = (x.rows, w.rows(), w.cols());
    let y = new_act(dev, rows, out_f);
    let mut args = tensor_core_args(dev, x, w, &y);
    args.extend([
        Arg::I(rows as i32),
        Arg::I(out_f as i32),
        Arg::I(cols as i32),
        Arg::I(mma_warps(w) as i32),
    ]);
    args.extend_from_slice(l.extra);
    let label = dev
        .profile
        .enabled
        .then(|| format!("{name} {out_f}x{cols}"));
    dev.launch_smem(name, label.as_deref(), l.grid, l.threads, l.smem, &args);
    y
}

/// Most matrices one launch of the streamed or bf16 tensor-core kernels takes (project_stream.cu STREAM_A4).
const MAX_JOBS: usize = 4;

/// x Wᵢᵀ for each of `ws` on tensor cores (see mma_plan): one launch for all of them when their plans name one
/// kernel of a family that takes several matrices (the weight stream, bf16 weights), else one launch each.
fn project_mma(
    dev: &Dev,
    x: &CudaAct,
    ws: &[&CudaMatrix],
    kernel: &str,
    stages: usize,
) -> Vec<CudaAct> {
    let (rows, cols) = (x.rows, ws[0].cols());
    let plans: Vec<MmaPlan> = ws
        .iter()
        .map(|w| mma_plan(rows, w, kernel, stages))
        .collect();
    let plan = &plans[0];
    let bf16 = kernel == "project_mma_bf16";
    let jobs = plan.streamed || bf16;
    let shared = ws.len() <= MAX_JOBS
        && plans.iter().map(|p| p.tiles).sum::<u32>() <= MAX_TILES
        && plans.iter().all(|p| {
            p.name == plan.name && p.warps == plan.warps && p.row_blocks == plan.row_blocks
        });
    if ws.len() > 1 && !(jobs && shared) {
        return ws
            .iter()
            .flat_map(|w| project_mma(dev, x, &[w], kernel, stages))
            .collect();
    }
    let ys: Vec<CudaAct> = ws.iter().map(|w| new_act(dev, rows, w.rows())).collect();
    let p = prepared(dev, x);
    let mut args = vec![Arg::P(dev.ptr(&p.hi)), Arg::P(dev.ptr(&p.lo))];
    if !bf16 {
        args.push(Arg::P(dev.ptr(&p.sums)));
    }
    let mut tiles = plan.tiles;
    if jobs {
        tiles = job_args(dev, ws, &ys, |j| plans[j].tiles, &mut args);
        args.extend([Arg::I(rows as i32), Arg::I(cols as i32)]);
        if plan.streamed {
            args.push(Arg::I(stream_early() as i32));
        }
        args.extend(crate::ahead::ahead_args(dev, ws[0]));
    } else {
        args.extend(weight_args(dev, ws[0]));
        args.push(Arg::P(dev.ptr(&ys[0].buf)));
        args.extend([
            Arg::I(rows as i32),
            Arg::I(ws[0].rows() as i32),
            Arg::I(cols as i32),
        ]);
    }
    // Profiled per shape, so the profile gives each matrix's bandwidth.
    let label = dev.profile.enabled.then(|| {
        let shapes: Vec<String> = ws.iter().map(|w| format!("{}x{cols}", w.rows())).collect();
        format!("{} {}", plan.name, shapes.join("+"))
    });
    dev.launch_as(
        &plan.name,
        label.as_deref(),
        mma_grid(tiles, plan.row_blocks),
        (plan.warps * 32) as u32,
        &args,
    );
    ys
}

/// The per-matrix arguments of a launch shared by up to MAX_JOBS matrices `ws` (outputs `ys`): each one's weights,
/// output and output count, and from the second on the first grid unit (tile or block) it takes. Matrix j's units
/// (`units(j)` of them) follow those of the matrices before it; absent ones repeat the first's arguments and start at
/// i32::MAX, so no block takes them. Returns the units of all.
fn job_args(
    dev: &Dev,
    ws: &[&CudaMatrix],
    ys: &[CudaAct],
    units: impl Fn(usize) -> u32,
    args: &mut Vec<Arg>,
) -> u32 {
    let mut total = 0;
    for j in 0..MAX_JOBS {
        let (w, y) = match ws.get(j) {
            Some(w) => (*w, &ys[j]),
            None => (ws[0], &ys[0]),
        };
        args.extend(weight_args(dev, w));
        args.push(Arg::P(dev.ptr(&y.buf)));
        args.push(Arg::I(w.rows() as i32));
        if j > 0 {
            args.push(Arg::I(if j < ws.len() { total as i32 } else { i32::MAX }));
        }
        if j < ws.len() {
            total += units(j);
        }
    }
    total
}

/// Whether the 4-bit weight stream copies its first stages before the previous kernel is done (project_stream.cu;
/// weights never change during a forward, so timing only): on unless `TENSORFOLD_CUDA_EARLY=0`.
fn stream_early() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_EARLY").map_or(true, |v| v != "0"))
}

#[cfg(test)]
mod tests {
    use super::row_tiles;

    #[test]
    fn calls_take_one_row_tile_up_to_4_rows_two_up_to_16_and_four_above() {
        let default: Vec<usize> = [1, 4, 5, 8, 9, 16, 17, 64]
            .iter()
            .map(|&r| row_tiles(r, None))
            .collect();
        assert_eq!(default, [1, 1, 2, 2, 2, 2, 4, 4]);
        // TENSORFOLD_CUDA_MMA_NT: 4 takes 4 tiles from 9 rows, 1 and 2 cap them.
        assert_eq!(row_tiles(9, Some(4)), 4);
        assert_eq!(row_tiles(8, Some(4)), 2);
        assert_eq!(row_tiles(64, Some(2)), 2);
        assert_eq!(row_tiles(64, Some(1)), 1);
        assert_eq!(row_tiles(0, None), 1);
    }
}
