//! The norm checks of the backend-ops test for rows of 1,024 threads (4,096 columns or more): a row on a cluster of
//! 4 or 8 blocks (`rms_norm_c4`, `add_rms_norm_c8`, …) gives the bits of a row on one block, its tensor-core form
//! included.

use super::{act, dense, rel_err, Report, Rng};
use crate::ops::NORM_BLOCKS;
use crate::CudaBackend;
use std::sync::atomic::Ordering;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::Backend;
use tensorfold_core::DenseDType;

/// Runs `f` with every 1,024-thread norm on `blocks` blocks a row (1: one block; 4 or 8: a cluster).
fn with_blocks<T>(blocks: usize, f: impl FnOnce() -> T) -> T {
    NORM_BLOCKS.store(blocks, Ordering::Relaxed);
    let out = f();
    NORM_BLOCKS.store(0, Ordering::Relaxed);
    out
}

/// What one norm configuration gives: rms_norm's rows, add_rms_norm's rows and residual, and a bf16 projection of
/// each normed output through its own tensor-core form (hi and lo at 1 row, the wgmma B tiles at 9).
struct Normed {
    plain: Vec<f32>,
    fused: Vec<f32>,
    residual: Vec<f32>,
    plain_projected: Vec<f32>,
    fused_projected: Vec<f32>,
}

fn norms(
    gpu: &CudaBackend,
    x: &[f32],
    y: &[f32],
    w: &[f32],
    m: &[f32],
    rows: usize,
    cols: usize,
) -> Normed {
    let out_f = m.len() / cols;
    let mat = gpu
        .matrix(&dense(DenseDType::BF16, out_f, cols, m))
        .expect("upload");
    let wv = gpu.vector(w).expect("gpu");
    let xg = act(gpu, rows, cols, x);
    let plain = gpu.rms_norm(&xg, &wv, 1e-6);
    let mut res = act(gpu, rows, cols, x);
    let fused = gpu.add_rms_norm(&mut res, &act(gpu, rows, cols, y), &wv, 1e-6);
    Normed {
        plain_projected: gpu.to_host(&gpu.project(&plain, &mat)),
        fused_projected: gpu.to_host(&gpu.project(&fused, &mat)),
        plain: gpu.to_host(&plain),
        fused: gpu.to_host(&fused),
        residual: gpu.to_host(&res),
    }
}

/// Rows of 4,160 columns (the registers' path) at 1 and 9 rows, and of 8,256 (the looping path) at 2: the cluster
/// kernels of 4 and 8 blocks against the one-block ones bit for bit, and those against the CPU twin.
pub(super) fn check_norm_clusters(
    rep: &mut Report,
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut Rng,
) {
    for (rows, cols) in [(1usize, 4160usize), (9, 4160), (2, 8256)] {
        let x = rng.vec(rows * cols, 2.0);
        let y = rng.vec(rows * cols, 2.0);
        let w = rng.vec(cols, 1.0);
        let m = rng.vec(24 * cols, 0.5);
        let one = with_blocks(1, || norms(gpu, &x, &y, &w, &m, rows, cols));
        for size in [4, 8] {
            let cl = with_blocks(size, || norms(gpu, &x, &y, &w, &m, rows, cols));
            let (rn, arn) = (format!("rms_norm_c{size}"), format!("add_rms_norm_c{size}"));
            let tag = format!("{rows} rows of {cols}");
            rep.same(&format!("{rn} == rms_norm ({tag})"), &cl.plain, &one.plain);
            rep.same(
                &format!("{arn} == add_rms_norm ({tag}, normed rows)"),
                &cl.fused,
                &one.fused,
            );
            rep.same(
                &format!("{arn} == add_rms_norm ({tag}, the residual)"),
                &cl.residual,
                &one.residual,
            );
            rep.same(
                &format!("{rn}'s tensor-core form projects as rms_norm's ({tag})"),
                &cl.plain_projected,
                &one.plain_projected,
            );
            rep.same(
                &format!("{arn}'s tensor-core form projects as add_rms_norm's ({tag})"),
                &cl.fused_projected,
                &one.fused_projected,
            );
        }
        let want = cpu.to_host(&cpu.rms_norm(
            &act(cpu, rows, cols, &x),
            &cpu.vector(&w).expect("cpu"),
            1e-6,
        ));
        rep.close(
            &format!("rms_norm vs CPU ({rows} rows of {cols})"),
            rel_err(&one.plain, &want),
            1e-5,
        );
    }
}
