//! One input projected by several matrices (qkv, z, b and a; q, k and v; gate and up) in shared launches of the
//! tensor-core kernels (project.rs project_mma), each output with the bits of its own projection.

use super::{
    alloc_prepared, fuse_prepare, gemm_for, gemm_kernel, launch_plan, mma_kernel, mma_layout,
    mma_warps, project, project_mma, project_wgmma, wgmma_kernel, MAX_JOBS,
};
use crate::device::Dev;
use crate::ops::{new_act, CudaAct, CudaMatrix};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Most rows a call may have for all its matrices to share launches (project_many; `TENSORFOLD_CUDA_MANY_ROWS`
/// sets it for same-run comparisons, the bits are the same). 27B MLX4: one launch for qkv, z, b and a and one for
/// q, k and v took 1-row rounds to 7.11 ms from 7.61 (call 51), 16-row rounds to 15.4 from 15.7 (call 54).
pub(crate) fn many_rows() -> usize {
    static ROWS: OnceLock<usize> = OnceLock::new();
    *ROWS.get_or_init(|| {
        std::env::var("TENSORFOLD_CUDA_MANY_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16)
    })
}

/// x Wᵢᵀ for each of `ws` (matrices sharing the input, e.g. qkv, z, b and a): tensor-core matrices of one kernel
/// family, column count and warps share launches of up to four, each output with the bits of its own `project`;
/// above `many_rows` rows only runs of neighbours of one shape share (b and a; k and v; gate and up). A round the
/// wgmma kernel takes for any of them takes it for all, in launches of up to four. Prompt rows and every other
/// matrix take one launch each.
pub(crate) fn project_many(dev: &Dev, x: &CudaAct, ws: &[&CudaMatrix]) -> Vec<CudaAct> {
    let kernel = mma_kernel(ws[0]).filter(|k| {
        many_enabled()
            && ws.iter().all(|w| {
                mma_kernel(w).as_ref() == Some(k)
                    && w.cols() == ws[0].cols()
                    && mma_warps(w) == mma_warps(ws[0])
            })
    });
    // Prompt rows take the prompt kernel, one launch per matrix.
    let kernel = kernel.filter(|k| !(gemm_for(x.rows) && gemm_kernel(k).is_some()));
    let Some(kernel) = kernel.filter(|_| ws.len() > 1) else {
        return ws.iter().map(|w| project(dev, x, w)).collect();
    };
    assert_eq!(
        x.cols,
        ws[0].cols(),
        "project: x has {} columns, W has {}",
        x.cols,
        ws[0].cols()
    );
    // A round the wgmma kernel takes for any of the matrices takes it for all (the small ones, DeltaNet's b and a,
    // then cost a block each instead of a launch of the weight stream), in launches of up to MAX_JOBS.
    if let Some(name) = ws
        .iter()
        .find_map(|w| wgmma_kernel(dev, &kernel, x.rows, w.rows()))
    {
        return ws
            .chunks(MAX_JOBS)
            .flat_map(|run| project_wgmma(dev, x, run, &name))
            .collect();
    }
    let shapes: Vec<(usize, usize)> = ws.iter().map(|w| (w.rows(), w.cols())).collect();
    let mut ys = Vec::with_capacity(ws.len());
    let mut rest = ws;
    for n in launch_runs(&shapes, x.rows <= many_rows()) {
        ys.extend(project_mma(
            dev,
            x,
            &rest[..n],
            &kernel,
            mma_layout().0,
            None,
        ));
        rest = &rest[n..];
    }
    ys
}

/// 32-output chunks a gate and up launch with its SwiGLU may have (Dev::swiglu_tickets): 262,144 outputs, eight
/// times the published shapes' largest.
pub(crate) const SWIGLU_TICKETS: usize = 8192;

/// silu(x Gᵀ)·(x Uᵀ) and its tensor-core form, stored by the gate and up launch itself (project_stream.cu
/// swiglu_tail) when the pair shares one weight-stream launch of one row block (decode rounds of up to 4 rows of
/// 4-bit weights); None otherwise, and the caller runs the pair and `swiglu`. The same bits either way.
/// `TENSORFOLD_CUDA_SWIGLU_TAIL=1` turns it on (off by default until timed against the swiglu launch).
pub(crate) fn project_swiglu(
    dev: &Dev,
    x: &CudaAct,
    gate: &CudaMatrix,
    up: &CudaMatrix,
) -> Option<CudaAct> {
    let (rows, out) = (x.rows, gate.rows());
    let fits = swiglu_tail_enabled()
        && many_enabled()
        && !gemm_for(rows)
        && fuse_prepare(out)
        && (up.rows(), up.cols(), gate.cols()) == (out, x.cols, x.cols)
        && out / 32 <= SWIGLU_TICKETS;
    let kernel = mma_kernel(gate).filter(|k| {
        fits && mma_kernel(up).as_ref() == Some(k)
            && mma_warps(up) == mma_warps(gate)
            && wgmma_kernel(dev, k, rows, out).is_none()
    })?;
    let ws = [gate, up];
    let (plans, shared) = launch_plan(rows, &ws, &kernel, mma_layout().0);
    if !(shared && plans[0].streamed && plans[0].row_blocks == 1) {
        return None;
    }
    let act = new_act(dev, rows, out);
    let p = alloc_prepared(dev, rows, out);
    drop(project_mma(
        dev,
        x,
        &ws,
        &kernel,
        mma_layout().0,
        Some((&act, &p)),
    ));
    let _ = act.prepared.set(p);
    Some(act)
}

/// Set by the backend-ops test to run project_swiglu's tail whatever the environment says.
pub(crate) static SWIGLU_TAIL: AtomicBool = AtomicBool::new(false);

/// Whether gate and up launches store their SwiGLU (project_swiglu): `TENSORFOLD_CUDA_SWIGLU_TAIL=1`.
fn swiglu_tail_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    SWIGLU_TAIL.load(Ordering::Relaxed)
        || *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_SWIGLU_TAIL").is_ok_and(|v| v == "1"))
}

/// How many consecutive matrices of `shapes` each shared launch takes: up to MAX_JOBS of any shapes when `all`,
/// else up to MAX_JOBS neighbours of one shape.
fn launch_runs(shapes: &[(usize, usize)], all: bool) -> Vec<usize> {
    let mut runs = Vec::new();
    let mut rest = shapes;
    while let Some(first) = rest.first() {
        let n = if all {
            rest.len()
        } else {
            rest.iter().take_while(|s| *s == first).count()
        }
        .min(MAX_JOBS);
        runs.push(n);
        rest = &rest[n..];
    }
    runs
}

/// Whether matrices sharing an input may share a launch (`TENSORFOLD_CUDA_PAIR=0`: one launch each, for
/// before/after measurements in one run; the bits are the same).
fn many_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_PAIR").map_or(true, |v| v != "0"))
}

#[cfg(test)]
mod tests {
    use super::launch_runs;

    #[test]
    fn matrices_share_launches_of_four_and_above_many_rows_only_neighbours_of_one_shape() {
        // DeltaNet qkv, z, b and a of the 27B shape; attention q, k and v; five of one shape.
        let dn = [(10240, 5120), (6144, 5120), (48, 5120), (48, 5120)];
        let attn = [(12288, 5120), (1024, 5120), (1024, 5120)];
        let five = [(20, 64); 5];
        assert_eq!(launch_runs(&dn, true), [4]);
        assert_eq!(launch_runs(&dn, false), [1, 1, 2]);
        assert_eq!(launch_runs(&attn, true), [3]);
        assert_eq!(launch_runs(&attn, false), [1, 2]);
        assert_eq!(launch_runs(&five, true), [4, 1]);
        assert_eq!(launch_runs(&five, false), [4, 1]);
        assert_eq!(launch_runs(&[], true), Vec::<usize>::new());
    }
}
