//! (Experimental) rounds of 5 to 16 rows of MLX 4-bit g64 weights on Hopper's warpgroup mma
//! (project_wgmma.cu), with the decode kernels' bits: `TENSORFOLD_CUDA_WGMMA=1`, which also builds the module for
//! sm_90a (device.rs). Off by default: the decode kernels' bits on the H200, but 16-row rounds 5% slower than theirs
//! (BENCHMARKS.md, calls 97–103).

use super::{mma_warps, prepared, weight_args, MAX_JOBS};
use crate::device::{env_usize, Arg, Dev};
use crate::ops::{blocks, new_act, CudaAct, CudaMatrix};
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

/// x Wᵢᵀ for each of `ws` (4-bit g64 matrices of x's columns and one mma_warps; at most MAX_JOBS) in one launch of
/// wgmma kernel `name`: blocks of one warpgroup, 128 outputs (two tiles a warp) × up to 16 rows, matrix j's blocks
/// after those of the matrices before it, each output's groups walked in the decode kernels' warp split
/// (mma_warps), so the bits are theirs; split over mma_warps blocks an output block when the launch has few blocks
/// (split_below), their sums added in order by the last to finish.
pub(super) fn project_wgmma(
    dev: &Dev,
    x: &CudaAct,
    ws: &[&CudaMatrix],
    name: &str,
) -> Vec<CudaAct> {
    assert!(
        !ws.is_empty() && ws.len() <= MAX_JOBS,
        "a wgmma launch of {} matrices",
        ws.len()
    );
    let nw = mma_warps(ws[0]);
    assert!(
        ws.iter().all(|w| w.cols() == x.cols && mma_warps(w) == nw),
        "a shared wgmma launch of matrices of other columns or warps"
    );
    let rows = x.rows;
    let ys: Vec<CudaAct> = ws.iter().map(|w| new_act(dev, rows, w.rows())).collect();
    let p = prepared(dev, x);
    let tiles = Arg::P(dev.ptr(b_tiles(dev, x)));
    let mut args = vec![
        Arg::P(dev.ptr(&p.hi)),
        Arg::P(dev.ptr(&p.lo)),
        Arg::P(dev.ptr(&p.sums)),
    ];
    // Matrix j's blocks follow those of the matrices before it; absent ones repeat the first's arguments and start
    // at i32::MAX, so no block takes them.
    let mut out_blocks = 0u32;
    for j in 0..MAX_JOBS {
        let (w, y) = match ws.get(j) {
            Some(w) => (*w, &ys[j]),
            None => (ws[0], &ys[0]),
        };
        args.extend(weight_args(dev, w));
        args.push(Arg::P(dev.ptr(&y.buf)));
        args.push(Arg::I(w.rows() as i32));
        if j > 0 {
            args.push(Arg::I(if j < ws.len() {
                out_blocks as i32
            } else {
                i32::MAX
            }));
        }
        if j < ws.len() {
            out_blocks += blocks(w.rows(), BLOCK_OUTPUTS);
        }
    }
    args.extend([
        Arg::I(rows as i32),
        Arg::I(x.cols as i32),
        Arg::I(nw as i32),
        tiles,
    ]);
    let split = (out_blocks as usize) < split_below();
    // The split launch's partial sums; unused by a launch of one block per output block, but an argument all the same.
    let partial = split.then(|| dev.scratch::<f32>(nw * out_blocks as usize * BLOCK_OUTPUTS * 16));
    args.push(Arg::P(partial.as_ref().map_or(0, |b| dev.ptr(b))));
    args.push(Arg::P(dev.ptr(&dev.tickets)));
    let label = dev.profile.enabled.then(|| {
        let shapes: Vec<String> = ws
            .iter()
            .map(|w| format!("{}x{}", w.rows(), x.cols))
            .collect();
        format!("{name} {}", shapes.join("+"))
    });
    let grid = (out_blocks, if split { nw as u32 } else { 1 }, 1);
    dev.launch_as(name, label.as_deref(), grid, 128, &args);
    ys
}

/// Whether the tensor-core form of `rows` × `cols` values also needs its wgmma B tiles: rounds the wgmma kernel
/// takes (5 to 16 rows, whole groups of 64), with the switch on. The producers of the form then write them
/// (project_mma.cu prepare_store).
pub(crate) fn takes_b_tiles(rows: usize, cols: usize) -> bool {
    wgmma_enabled() && (5..=16).contains(&rows) && cols.is_multiple_of(64)
}

/// Words of x's B tiles: 4,096 bytes a group of 64 columns.
pub(crate) fn b_tile_words(cols: usize) -> usize {
    cols / 64 * 1024
}

/// x's rows as the B tiles of its column groups, written beside its tensor-core form (alloc_prepared gives every
/// round the wgmma kernel takes room for them): every block of every matrix projected from x copies a group's tile
/// as 16-byte pieces.
fn b_tiles<'a>(dev: &Dev, x: &'a CudaAct) -> &'a crate::scratch::Buf<u32> {
    prepared(dev, x)
        .b_tiles
        .as_ref()
        .expect("a wgmma projection of rows whose tensor-core form has no B tiles")
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
