//! Rounds of 5 to 64 rows of MLX 4-bit g64 weights (project_wgmma.cu) and of bf16 weights (project_wgmma_bf16.cu)
//! on Hopper's warpgroup mma, with the decode kernels' bits: on Hopper unless `TENSORFOLD_CUDA_WGMMA=0` (the module
//! is then built for sm_90a, device.rs).
//! 27B MLX4 rounds of 16 rows take 12.9 ms on it against 14.2 on the decode kernels (BENCHMARKS.md, call 105).

use super::{job_args, mma_warps, prepared, MAX_JOBS};
use crate::device::{env_usize, Arg, Dev};
use crate::ops::{blocks, new_act, CudaAct, CudaMatrix};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Whether the wgmma kernels may run where the device has them (Dev::wgmma, Hopper): on unless
/// `TENSORFOLD_CUDA_WGMMA=0` (for same-run comparisons; the bits are the same either way).
pub(crate) fn wgmma_switch() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_WGMMA").map_or(true, |v| v != "0"))
}

/// Outputs a block computes (project_wgmma.cu: 4 warps × MT tiles of 16, MT = 2), or with the `_m1` kernels (MT = 1)
/// half as many.
const BLOCK_OUTPUTS: usize = 128;

/// Whether launches that fill less than a wave of blocks of BLOCK_OUTPUTS take the `_m1` kernels, whose blocks
/// compute half as many outputs, so twice as many walk the groups side by side (the 5,120-output down and out
/// projections of the 27B shape: 320 blocks of 128 outputs for 528 places). `TENSORFOLD_CUDA_WGMMA_M1=0` keeps
/// blocks of 128 outputs, for same-run comparisons; the bits are the same.
fn m1_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_WGMMA_M1").map_or(true, |v| v != "0"))
}

/// Matrices with fewer outputs keep the decode kernels, unless they share a launch with a larger one
/// (project_many); the bits are the same. `TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS` overrides it (0 puts the self-test's
/// small matrices on wgmma too).
const MIN_OUTPUTS: usize = 1024;

fn min_outputs() -> usize {
    static MIN: OnceLock<usize> = OnceLock::new();
    *MIN.get_or_init(|| env_usize("TENSORFOLD_CUDA_WGMMA_MIN_OUTPUTS").unwrap_or(MIN_OUTPUTS))
}

/// Fewest rows a round must have to take the wgmma kernel: rounds of 5 to 8 rows take its 16-column build
/// (m64n16k16), 9 to 16 its 32-column one, 17 to MAX_ROWS its 64-column one (m64n64k16, blocks of 64 outputs × 32
/// rows). 27B MLX4, call 106: rounds of 8 rows 10.92 ms on the 16-column build
/// against 12.10 on the decode kernels, of 16 rows 12.86 against 14.12 (up to 4 rows the decode kernels need one
/// row tile and stay). `TENSORFOLD_CUDA_WGMMA_MIN_ROWS` overrides it (5 to 16).
const MIN_ROWS: usize = 5;

/// bf16 matrices take it from more rows: their decode kernels' rounds of up to 8 rows cost little more than one row
/// (27B bf16, call 129, the rounds' x tiles through L1: 5 / 8 rows 16.5 / 17.1 ms on them against 18.1 / 18.3 on
/// wgmma), but 9 rows cost them 23.7 ms against 18.9 on wgmma (one run each).
const BF16_MIN_ROWS: usize = 9;

/// The fewest rows of the rounds of bf16 (`bf16`) or 4-bit matrices the wgmma kernel takes;
/// `TENSORFOLD_CUDA_WGMMA_MIN_ROWS` sets both formats'.
fn min_rows(bf16: bool) -> usize {
    static SET: OnceLock<Option<usize>> = OnceLock::new();
    let set = *SET.get_or_init(|| env_usize("TENSORFOLD_CUDA_WGMMA_MIN_ROWS"));
    let default = if bf16 { BF16_MIN_ROWS } else { MIN_ROWS };
    set.unwrap_or(default).clamp(5, 16)
}

/// Most rows a round may have to take the wgmma kernel: rounds of 17 rows or more take its 64-column build, which
/// holds 32 rows' hi and lo (x's two 16-row B tiles side by side), one block per output block and part of 32 rows.
/// From 65 rows calls are prompt chunks (project_gemm.rs). `TENSORFOLD_CUDA_WGMMA_MAX_ROWS` overrides it (16 to 64;
/// 16 keeps rounds of 17 rows or more on the decode kernels, for same-run comparisons; the bits are the same).
const MAX_ROWS: usize = 64;

fn max_rows() -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    *MAX.get_or_init(|| {
        env_usize("TENSORFOLD_CUDA_WGMMA_MAX_ROWS")
            .unwrap_or(MAX_ROWS)
            .clamp(16, MAX_ROWS)
    })
}

/// Whether rounds of bf16 matrices take the wgmma kernel (project_wgmma_bf16.cu): on unless
/// `TENSORFOLD_CUDA_WGMMA_BF16=0` (for same-run comparisons; the bits are the same either way).
fn bf16_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_WGMMA_BF16").map_or(true, |v| v != "0"))
}

/// Stages of the bf16 kernel's blocks of up to 16 rows (project_wgmma_bf16.cu WG_BF16_STAGES, 3;
/// `TENSORFOLD_CUDA_WGMMA_BF16_STAGES`, 2 to 8, builds the module with another count, nvrtc.rs) and of its
/// 64-column build (4), and their bytes: the group's B tiles (4,096 bytes a 16-row block of x) and 64 outputs' 128
/// bytes of weights; in dynamic shared memory.
pub(crate) const BF16_STAGES: usize = 3;
const BF16_N64_STAGES: usize = 4;

pub(crate) fn bf16_stages() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        env_usize("TENSORFOLD_CUDA_WGMMA_BF16_STAGES")
            .unwrap_or(BF16_STAGES)
            .clamp(2, 8)
    })
}

fn bf16_smem(n64: bool) -> u32 {
    if n64 {
        (BF16_N64_STAGES * (2 * 4096 + 64 * 128)) as u32
    } else {
        (bf16_stages() * (4096 + 64 * 128)) as u32
    }
}

/// The suffix of the 64-column build: blocks of 64 outputs always (one m64 block a warpgroup: 32 accumulators a
/// tile leave no room for two).
const N64: &str = "_n64";

/// The wgmma kernel for a call of `rows` rows of a matrix of `outputs` outputs of the tensor-core family `family`
/// (mma_kernel's name) on `dev`, if any: 4-bit groups of 64 or bf16, min_rows to max_rows rows, MIN_OUTPUTS outputs
/// or more.
pub(super) fn wgmma_kernel(dev: &Dev, family: &str, rows: usize, outputs: usize) -> Option<String> {
    dev.wgmma
        .then(|| {
            wgmma_kernel_for(
                family,
                rows,
                outputs,
                min_rows(family == "project_mma_bf16")..=max_rows(),
                min_outputs(),
            )
        })
        .flatten()
}

/// `wgmma_kernel` on a device that has it, for rounds of `rows_in` rows and matrices of `min` outputs or more.
fn wgmma_kernel_for(
    family: &str,
    rows: usize,
    outputs: usize,
    rows_in: std::ops::RangeInclusive<usize>,
    min: usize,
) -> Option<String> {
    // Rounds of up to 8 rows take the kernel of 16 B columns (m64n16k16), up to 16 that of 32, the others that of 64.
    let columns = if rows <= 8 {
        "_n16"
    } else if rows <= 16 {
        ""
    } else {
        N64
    };
    // 4-bit g64 matrices take the kernel of their scale type; bf16 ones project_wgmma_bf16.cu's (unless
    // `TENSORFOLD_CUDA_WGMMA_BF16=0`).
    let format = family.starts_with("project_mma_a4_g2_")
        || (family == "project_mma_bf16" && bf16_enabled());
    (rows_in.contains(&rows) && outputs >= min && format).then(|| {
        format!(
            "{}{columns}",
            family.replace("project_mma", "project_wgmma")
        )
    })
}

/// The build of wgmma kernel `name` a launch takes and its outputs a block: blocks of 64 outputs (`_m1`) for a
/// 4-bit launch of fewer than a wave of blocks of BLOCK_OUTPUTS (`small`); the 64-column and bf16 kernels' blocks
/// always have 64.
fn build(name: &str, small: bool) -> (String, usize) {
    let n64 = name.ends_with(N64);
    let bf16 = name.starts_with("project_wgmma_bf16");
    if n64 || bf16 {
        (name.to_string(), BLOCK_OUTPUTS / 2)
    } else if small {
        (format!("{name}_m1"), BLOCK_OUTPUTS / 2)
    } else {
        (name.to_string(), BLOCK_OUTPUTS)
    }
}

/// Tickets the split launches count their blocks with (device.rs allocates them zeroed): one per block of
/// outputs, so a split launch has at most this many.
pub(crate) const WGMMA_TICKETS: usize = 4096;

/// Launches of fewer blocks of outputs than this (a wave) split each output's groups over mma_warps blocks (one
/// residue each). Without the split a 5,120-output matrix
/// keeps 40 SMs busy (call 98: 5120×17408 in 140.5 µs, 63.5 split). `TENSORFOLD_CUDA_WGMMA_SPLIT` overrides it
/// (0: never split); the bits are the same either way.
const SPLIT_BELOW: usize = WAVE;

/// Blocks of 128 outputs the H200 runs at once: 4 an SM (the kernel's launch bound) × 132 SMs.
const WAVE: usize = 4 * 132;

/// The 64-column build's launches split below twice that: its 32-row gate/up launch (544 blocks of 64 outputs)
/// took 108 µs split against 117 whole, while 1,088-block launches (rounds of 33 to 64 rows) and the lm head lost
/// when split (call 123).
const N64_SPLIT_BELOW: usize = 2 * WAVE;

/// Set by the backend-ops test to run launches unsplit (a block walking every residue) beside split ones, as
/// launches of a wave of blocks or more run.
pub(crate) static WHOLE_LAUNCHES: AtomicBool = AtomicBool::new(false);

/// Launches of fewer blocks than this split (SPLIT_BELOW, or N64_SPLIT_BELOW for the 64-column build `n64`).
fn split_below(n64: bool) -> usize {
    static BELOW: OnceLock<Option<usize>> = OnceLock::new();
    if WHOLE_LAUNCHES.load(Ordering::Relaxed) {
        return 0;
    }
    let set = *BELOW.get_or_init(|| env_usize("TENSORFOLD_CUDA_WGMMA_SPLIT"));
    set.unwrap_or(if n64 { N64_SPLIT_BELOW } else { SPLIT_BELOW })
        .min(WGMMA_TICKETS + 1)
}

/// x Wᵢᵀ for each of `ws` (4-bit g64 or bf16 matrices of x's columns and one mma_warps; at most MAX_JOBS) in one
/// launch of wgmma kernel `name`: blocks of one warpgroup, 128 outputs (two tiles a warp; 64 and one when that leaves
/// less than a wave, the `_m1` kernel) × up to 16 rows, or 64 outputs × 32 rows (the `_n64` kernel, a block per part
/// of 32 rows, the parts side by side; the bf16 kernels' blocks always have 64 outputs), matrix j's blocks
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
    let n64 = name.ends_with(N64);
    let bf16 = name.starts_with("project_wgmma_bf16");
    // Blocks an output block: one per part of 32 rows (the 64-column kernel), else one.
    let parts = if n64 { rows.div_ceil(32) } else { 1 };
    // Blocks of BLOCK_OUTPUTS, split over the residues below a wave: fewer than a wave take blocks of half as many.
    let launch_blocks = |outputs: usize| {
        let b: usize = ws.iter().map(|w| w.rows().div_ceil(outputs)).sum::<usize>() * parts;
        b * if b < split_below(n64) { nw } else { 1 }
    };
    let small = m1_enabled() && launch_blocks(BLOCK_OUTPUTS) < WAVE;
    let (name, block_outputs) = build(name, small);
    let ys: Vec<CudaAct> = ws.iter().map(|w| new_act(dev, rows, w.rows())).collect();
    let p = prepared(dev, x);
    // alloc_prepared gives every round the wgmma kernel takes room for the B tiles, and the form's writer fills them.
    let tiles = p
        .b_tiles
        .as_ref()
        .expect("a wgmma projection of rows whose tensor-core form has no B tiles");
    let tiles = Arg::P(dev.ptr(tiles));
    let mut args = vec![
        Arg::P(dev.ptr(&p.hi)),
        Arg::P(dev.ptr(&p.lo)),
        Arg::P(dev.ptr(&p.sums)),
    ];
    let out_blocks = job_args(
        dev,
        ws,
        &ys,
        |j| blocks(ws[j].rows(), block_outputs),
        &mut args,
    );
    args.extend([
        Arg::I(rows as i32),
        Arg::I(x.cols as i32),
        Arg::I(nw as i32),
        tiles,
    ]);
    let grid_x = out_blocks * parts as u32;
    let split = (grid_x as usize) < split_below(n64);
    // The split launch's partial sums (a block's outputs × its rows' room: WgStage::PER_THREAD); unused by a launch
    // of one block per output block, but an argument all the same.
    let room = if n64 { 32 } else { 16 };
    let partial = split.then(|| dev.scratch::<f32>(nw * grid_x as usize * block_outputs * room));
    args.push(Arg::P(partial.as_ref().map_or(0, |b| dev.ptr(b))));
    args.push(Arg::P(dev.ptr(&dev.tickets)));
    let label = dev.profile.enabled.then(|| {
        let shapes: Vec<String> = ws
            .iter()
            .map(|w| format!("{}x{}", w.rows(), x.cols))
            .collect();
        format!("{name} {}", shapes.join("+"))
    });
    let grid = (grid_x, if split { nw as u32 } else { 1 }, 1);
    let smem = if bf16 { bf16_smem(n64) } else { 0 };
    dev.launch_smem(&name, label.as_deref(), grid, 128, smem, &args);
    ys
}

/// Whether the tensor-core form of `rows` × `cols` values also needs its wgmma B tiles, on a device that has the
/// wgmma kernels and for whole groups of 64 columns: rounds the wgmma kernel takes (min_rows to max_rows), and prompt
/// chunks once a matrix the wgmma prompt kernel takes is loaded (project_gemm.rs). The producers of the form
/// then write them (project_mma.cu prepare_store).
pub(crate) fn takes_b_tiles(dev: &Dev, rows: usize, cols: usize) -> bool {
    let prompt = || {
        super::gemm::wgmma_gemm_rows(rows)
            && dev
                .prompt_b_tiles
                .load(std::sync::atomic::Ordering::Relaxed)
    };
    // The fewest rows of either format: a round's form is written before the matrices it meets are known.
    let fewest = min_rows(false).min(min_rows(true));
    dev.wgmma && cols.is_multiple_of(64) && ((fewest..=max_rows()).contains(&rows) || prompt())
}

/// Words of x's B tiles: 4,096 bytes a group of 64 columns and block of 16 rows.
pub(crate) fn b_tile_words(rows: usize, cols: usize) -> usize {
    rows.div_ceil(16) * cols / 64 * 1024
}

#[cfg(test)]
mod tests {
    use super::wgmma_kernel_for;
    use crate::device::kernel_names;

    #[test]
    fn only_rounds_of_5_to_64_rows_of_4_bit_g64_and_bf16_matrices_of_1024_outputs_or_more_take_a_wgmma_kernel_and_it_is_built(
    ) {
        let module = kernel_names();
        for dt in ["f32", "f16", "bf16"] {
            for g in [1, 2, 4] {
                let family = format!("project_mma_a4_g{g}_{dt}");
                for rows in [1, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65] {
                    for outputs in [48, 1023, 1024, 5120] {
                        let takes = g == 2 && (5..=64).contains(&rows) && outputs >= 1024;
                        let (min, rows_in) =
                            (super::MIN_OUTPUTS, super::MIN_ROWS..=super::MAX_ROWS);
                        match wgmma_kernel_for(&family, rows, outputs, rows_in, min) {
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
        // Every build a launch of each takes exists: blocks of 64 outputs or of 128.
        for dt in ["f32", "f16", "bf16"] {
            for columns in ["", "_n16", "_n64"] {
                for small in [false, true] {
                    let name = format!("project_wgmma_a4_g2_{dt}{columns}");
                    let (build, outputs) = super::build(&name, small);
                    assert!(module.contains(&build), "{build} is not built");
                    assert_eq!(outputs == 64, small || columns == "_n64", "{build}");
                    let bf16 = format!("project_wgmma_bf16{columns}");
                    let (build, outputs) = super::build(&bf16, small);
                    assert!(module.contains(&build), "{build} is not built");
                    assert_eq!((build, outputs), (bf16, 64));
                }
            }
        }
        // bf16 matrices take project_wgmma_bf16.cu's kernels, of the same columns; 32-column groups never.
        for (rows, name) in [
            (9, Some("project_wgmma_bf16")),
            (5, Some("project_wgmma_bf16_n16")),
            (40, Some("project_wgmma_bf16_n64")),
            (65, None),
        ] {
            let got = wgmma_kernel_for("project_mma_bf16", rows, 5120, 5..=64, 1024);
            assert_eq!(got.as_deref(), name, "bf16, {rows} rows");
            assert!(got.is_none_or(|n| module.contains(&n)));
        }
        assert_eq!(
            wgmma_kernel_for("project_mma_a4_g1_bf16", 9, 5120, 5..=64, 0),
            None
        );
        // With rounds of 5 rows and more let in, those of up to 8 take the kernel of 16 B columns.
        for (rows, name) in [
            (4, None),
            (5, Some("project_wgmma_a4_g2_bf16_n16")),
            (8, Some("project_wgmma_a4_g2_bf16_n16")),
            (9, Some("project_wgmma_a4_g2_bf16")),
            (16, Some("project_wgmma_a4_g2_bf16")),
            (17, Some("project_wgmma_a4_g2_bf16_n64")),
            (32, Some("project_wgmma_a4_g2_bf16_n64")),
            (64, Some("project_wgmma_a4_g2_bf16_n64")),
            (65, None),
        ] {
            let got = wgmma_kernel_for("project_mma_a4_g2_bf16", rows, 5120, 5..=64, 1024);
            assert_eq!(got.as_deref(), name, "{rows} rows");
            // Launches of less than a wave take the same kernel with blocks of 64 outputs (the 64-column kernel's
            // blocks always have 64).
            let m1 = |n: &str| n.ends_with(super::N64) || module.contains(&format!("{n}_m1"));
            assert!(got.is_none_or(|n| module.contains(&n) && m1(&n)));
        }
        // With the most rows held at 16, rounds of 17 keep the decode kernels.
        assert_eq!(
            wgmma_kernel_for("project_mma_a4_g2_bf16", 17, 5120, 5..=16, 1024),
            None
        );
    }
}
