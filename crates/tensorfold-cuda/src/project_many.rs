//! One input projected by several matrices (qkv, z, b and a; q, k and v; gate and up) in shared launches of the
//! tensor-core kernels (project.rs project_mma), each output with the bits of its own projection.

use super::{
    gemm_for, gemm_kernel, mma_kernel, mma_layout, mma_warps, project, project_mma, project_wgmma,
    wgmma_kernel, MAX_JOBS,
};
use crate::device::Dev;
use crate::ops::{CudaAct, CudaMatrix};
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
        ys.extend(project_mma(dev, x, &rest[..n], &kernel, mma_layout().0));
        rest = &rest[n..];
    }
    ys
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
