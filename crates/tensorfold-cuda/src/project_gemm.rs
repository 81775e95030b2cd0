//! The prompt kernel's dispatch (project_gemm.cu): which calls take it, which kernel, and its launch; every
//! choice here gives the decode kernels' bits.

use super::launch_split_walk;
use crate::device::Dev;
use crate::ops::{blocks, CudaAct, CudaMatrix};
use std::sync::OnceLock;

/// Whether the prompt kernel for bf16 weights takes its blocks as numbered, tiles inner
/// (`TENSORFOLD_CUDA_GEMM_ORDER=tiles`, the order before groups of row blocks walked the tiles together:
/// project_gemm.cu gemm_block; 4-bit weights always do), for same-run comparisons; the kernels then get
/// TF_GEMM_TILES_FIRST (nvrtc.rs). The bits are the same either way.
pub(crate) fn gemm_tiles_first() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_GEMM_ORDER").is_ok_and(|v| v == "tiles"))
}

/// Whether a call of `rows` rows takes the prompt kernel (project_gemm.cu) where the matrix allows: from
/// `TENSORFOLD_CUDA_GEMM_ROWS` rows (default 65: prompt chunks; decode rounds of up to 64 rows keep the decode
/// kernels), never with `TENSORFOLD_CUDA_GEMM=0` (for before/after measurements in one run). Either kernel gives
/// the same bits, so the threshold is free.
pub(super) fn gemm_for(rows: usize) -> bool {
    static FROM: OnceLock<usize> = OnceLock::new();
    let from = *FROM.get_or_init(|| {
        if std::env::var("TENSORFOLD_CUDA_GEMM").is_ok_and(|v| v == "0") {
            return usize::MAX;
        }
        crate::device::env_usize("TENSORFOLD_CUDA_GEMM_ROWS")
            .unwrap_or(65)
            .max(1)
    });
    rows >= from
}

/// The prompt kernel of a tensor-core kernel family (`mma_kernel`'s name): bf16, and MLX 4-bit in groups of 32 or
/// 64; `None` for groups of 128, whose stages do not fit, which keep the decode kernels.
pub(super) fn gemm_kernel(family: &str) -> Option<String> {
    (!family.starts_with("project_mma_a4_g4"))
        .then(|| family.replace("project_mma", "project_gemm"))
}

/// y = x Wᵀ by the prompt kernel `name`: blocks of 64 outputs × 64 rows, 4 warps, each output's column groups
/// split as the decode kernels split them (mma_warps), so the bits are theirs.
pub(super) fn project_gemm(dev: &Dev, x: &CudaAct, w: &CudaMatrix, name: &str) -> CudaAct {
    let grid = (blocks(w.rows(), 64), blocks(x.rows, 64), 1);
    launch_split_walk(dev, x, w, name, grid)
}

#[cfg(test)]
mod tests {
    use super::gemm_kernel;
    use crate::device::kernel_names;

    #[test]
    fn every_prompt_kernel_the_dispatch_names_is_in_the_module() {
        let module = kernel_names();
        let mut families = vec!["project_mma_bf16".to_string()];
        for dt in ["f32", "f16", "bf16"] {
            for g in [1, 2, 4] {
                families.push(format!("project_mma_a4_g{g}_{dt}"));
            }
        }
        for family in &families {
            match gemm_kernel(family) {
                Some(name) => assert!(module.contains(&name), "{family} -> {name} is not built"),
                None => assert!(family.contains("_g4_"), "{family} has no prompt kernel"),
            }
        }
    }
}
