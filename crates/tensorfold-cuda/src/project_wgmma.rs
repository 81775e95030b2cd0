//! (Experimental) rounds of 5 to 16 rows of MLX 4-bit g64 weights on Hopper's warpgroup mma
//! (project_wgmma.cu), with the decode kernels' bits: `TENSORFOLD_CUDA_WGMMA=1`, which also builds the module for
//! sm_90a (device.rs). Off by default: the decode kernels' bits on the H200, but 16-row rounds 5% slower than theirs
//! (BENCHMARKS.md, calls 97–103).

use super::{launch_split_walk, mma_warps, prepared};
use crate::device::{env_usize, Arg, Dev};
use crate::ops::{blocks, CudaAct, CudaMatrix};
use std::sync::OnceLock;

/// Whether `TENSORFOLD_CUDA_WGMMA=1` asks for the wgmma kernels.
pub(crate) fn wgmma_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_WGMMA").is_ok_and(|v| v == "1"))
}

/// Outputs a block computes (project_wgmma.cu: 4 warps × WG_MT tiles of 16).
const BLOCK_OUTPUTS: usize = 128;

/// Matrices with fewer outputs keep the decode kernels, where they share launches with their neighbours (the
/// 48-output b and a of DeltaNet took 10 µs a launch of their own on wgmma, call 99); the bits are the same.
/// `TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS` overrides it (0 puts the self-test's small matrices on wgmma too).
const MIN_OUTPUTS: usize = 1024;

fn min_outputs() -> usize {
    static MIN: OnceLock<usize> = OnceLock::new();
    *MIN.get_or_init(|| env_usize("TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS").unwrap_or(MIN_OUTPUTS))
}

/// The wgmma kernel for a call of `rows` rows of a matrix of `outputs` outputs of the tensor-core family `family`
/// (mma_kernel's name), if any: 4-bit groups of 64, 5 to 16 rows, MIN_OUTPUTS outputs or more.
pub(super) fn wgmma_kernel(family: &str, rows: usize, outputs: usize) -> Option<String> {
    wgmma_enabled()
        .then(|| wgmma_kernel_for(family, rows, outputs, min_outputs()))
        .flatten()
}

/// `wgmma_kernel` when the switch is on and matrices of `min` outputs or more take it.
fn wgmma_kernel_for(family: &str, rows: usize, outputs: usize, min: usize) -> Option<String> {
    ((5..=16).contains(&rows) && outputs >= min && family.starts_with("project_mma_a4_g2_"))
        .then(|| family.replace("project_mma", "project_wgmma"))
}

/// Tickets the split launches count their blocks with (device.rs allocates them zeroed): one per block of
/// outputs, so a split launch has at most this many.
pub(crate) const WGMMA_TICKETS: usize = 4096;

/// Launches of fewer blocks of outputs than this split each output's groups over mma_warps blocks (one residue
/// each): 4 blocks an SM (the kernel's launch bound) × the H200's 132 SMs. Without the split a 5,120-output matrix
/// keeps 40 SMs busy (call 98: 5120×17408 in 140.5 µs, 63.5 split). `TENSORFOLD_CUDA_WGMMA_SPLIT` overrides it
/// (0: never split); the bits are the same either way.
const SPLIT_BELOW: usize = 4 * 132;

fn split_below() -> usize {
    static BELOW: OnceLock<usize> = OnceLock::new();
    *BELOW.get_or_init(|| {
        env_usize("TENSORFOLD_CUDA_WGMMA_SPLIT")
            .unwrap_or(SPLIT_BELOW)
            .min(WGMMA_TICKETS + 1)
    })
}

/// y = x Wᵀ by wgmma kernel `name`: blocks of one warpgroup, 128 outputs (two tiles a warp) × up to 16 rows, each
/// output's groups walked in the decode kernels' warp split (mma_warps), so the bits are theirs; split over
/// mma_warps blocks an output block when the matrix has few outputs (split_below), their sums added in order by
/// the last to finish.
pub(super) fn project_wgmma(dev: &Dev, x: &CudaAct, w: &CudaMatrix, name: &str) -> CudaAct {
    let out_blocks = blocks(w.rows(), BLOCK_OUTPUTS);
    let tiles = Arg::P(dev.ptr(b_tiles(dev, x)));
    if (out_blocks as usize) < split_below() {
        let nw = mma_warps(w);
        let partial = dev.scratch::<f32>(nw * out_blocks as usize * BLOCK_OUTPUTS * 16);
        let tail = [
            tiles,
            Arg::P(dev.ptr(&partial)),
            Arg::P(dev.ptr(&dev.tickets)),
        ];
        launch_split_walk(dev, x, w, name, (out_blocks, nw as u32, 1), &tail)
    } else {
        // Unused by a launch of one block per output block, but the kernel's arguments all the same.
        let tail = [tiles, Arg::P(0), Arg::P(dev.ptr(&dev.tickets))];
        launch_split_walk(dev, x, w, name, (out_blocks, 1, 1), &tail)
    }
}

/// x's rows as the B tiles of its column groups (4,096 bytes a group of 64 columns), made once per x: every
/// block of every matrix projected from x then copies a group's tile as 16-byte pieces.
fn b_tiles<'a>(dev: &Dev, x: &'a CudaAct) -> &'a crate::scratch::Buf<u32> {
    let p = prepared(dev, x);
    p.b_tiles.get_or_init(|| {
        let groups = x.cols / 64;
        let t = dev.scratch::<u32>(groups * 1024);
        dev.launch(
            "wgmma_b_tiles",
            (groups.max(1) as u32, 1, 1),
            128,
            &[
                Arg::P(dev.ptr(&p.hi)),
                Arg::P(dev.ptr(&p.lo)),
                Arg::P(dev.ptr(&t)),
                Arg::I(x.rows as i32),
                Arg::I(x.cols as i32),
            ],
        );
        t
    })
}

#[cfg(test)]
mod tests {
    use super::wgmma_kernel_for;
    use crate::device::kernel_names;

    #[test]
    fn only_rounds_of_5_to_16_rows_of_4_bit_g64_matrices_of_1024_outputs_or_more_take_a_wgmma_kernel_and_it_is_built(
    ) {
        let module = kernel_names();
        for dt in ["f32", "f16", "bf16"] {
            for g in [1, 2, 4] {
                let family = format!("project_mma_a4_g{g}_{dt}");
                for rows in [1, 4, 5, 9, 16, 17, 64] {
                    for outputs in [48, 1023, 1024, 5120] {
                        let takes = g == 2 && (5..=16).contains(&rows) && outputs >= 1024;
                        match wgmma_kernel_for(&family, rows, outputs, super::MIN_OUTPUTS) {
                            Some(name) => {
                                assert!(takes, "{family} at {rows} rows of {outputs}");
                                assert!(module.contains(&name), "{name} is not built");
                            }
                            None => assert!(!takes, "{family} at {rows} rows of {outputs}"),
                        }
                    }
                }
            }
        }
        assert_eq!(wgmma_kernel_for("project_mma_bf16", 9, 5120, 0), None);
    }
}
