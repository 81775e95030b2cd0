//! (Experimental) rounds of 5 to 16 rows of MLX 4-bit g64 weights on Hopper's warpgroup mma
//! (project_wgmma.cu), with the decode kernels' bits: `TENSORFOLD_CUDA_WGMMA=1`, which also builds the module for
//! sm_90a (device.rs). Off by default: not yet timed on the GPU.

use super::launch_split_walk;
use crate::device::Dev;
use crate::ops::{blocks, CudaAct, CudaMatrix};
use std::sync::OnceLock;

/// Whether `TENSORFOLD_CUDA_WGMMA=1` asks for the wgmma kernels.
pub(crate) fn wgmma_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_WGMMA").is_ok_and(|v| v == "1"))
}

/// The wgmma kernel for a call of `rows` rows of the tensor-core family `family` (mma_kernel's name), if any:
/// 4-bit groups of 64, 5 to 16 rows.
pub(super) fn wgmma_kernel(family: &str, rows: usize) -> Option<String> {
    wgmma_enabled()
        .then(|| wgmma_kernel_for(family, rows))
        .flatten()
}

/// `wgmma_kernel` when the switch is on.
fn wgmma_kernel_for(family: &str, rows: usize) -> Option<String> {
    ((5..=16).contains(&rows) && family.starts_with("project_mma_a4_g2_"))
        .then(|| family.replace("project_mma", "project_wgmma"))
}

/// y = x Wᵀ by wgmma kernel `name`: blocks of one warpgroup, 64 outputs (a tile a warp) × up to 16 rows, each
/// output's groups walked in the decode kernels' warp split (mma_warps), so the bits are theirs.
pub(super) fn project_wgmma(dev: &Dev, x: &CudaAct, w: &CudaMatrix, name: &str) -> CudaAct {
    launch_split_walk(dev, x, w, name, (blocks(w.rows(), 64), 1, 1))
}

#[cfg(test)]
mod tests {
    use super::wgmma_kernel_for;
    use crate::device::kernel_names;

    #[test]
    fn only_rounds_of_5_to_16_rows_of_4_bit_g64_weights_take_a_wgmma_kernel_and_it_is_built() {
        let module = kernel_names();
        for dt in ["f32", "f16", "bf16"] {
            for g in [1, 2, 4] {
                let family = format!("project_mma_a4_g{g}_{dt}");
                for rows in [1, 4, 5, 9, 16, 17, 64] {
                    match wgmma_kernel_for(&family, rows) {
                        Some(name) => {
                            assert!(
                                g == 2 && (5..=16).contains(&rows),
                                "{family} at {rows} rows"
                            );
                            assert!(module.contains(&name), "{name} is not built");
                        }
                        None => assert!(
                            g != 2 || !(5..=16).contains(&rows),
                            "{family} at {rows} rows"
                        ),
                    }
                }
            }
        }
        assert_eq!(wgmma_kernel_for("project_mma_bf16", 9), None);
    }
}
