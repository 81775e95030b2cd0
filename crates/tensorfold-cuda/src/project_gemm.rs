//! The prompt kernel's dispatch (project_gemm.cu): which calls take it, which kernel, and its launch; every
//! choice here gives the decode kernels' bits.

use super::{launch_split_walk, mma_kernel, prepared, SplitWalk};
use crate::device::{Arg, Dev};
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
/// split as the decode kernels split them (mma_warps), so the bits are theirs. bf16 and 4-bit g64 weights take the
/// wgmma prompt kernel instead where x has its B tiles (wgmma_gemm).
pub(super) fn project_gemm(dev: &Dev, x: &CudaAct, w: &CudaMatrix, name: &str) -> CudaAct {
    if let Some(y) = wgmma_gemm(dev, x, w, name) {
        return y;
    }
    let grid = (blocks(w.rows(), 64), blocks(x.rows, 64), 1);
    let launch = SplitWalk {
        grid,
        threads: 128,
        smem: 0,
        extra: &[],
    };
    launch_split_walk(dev, x, w, name, launch)
}

/// Warpgroups a block of the wgmma prompt kernel (project_wgmma_gemm.cu): `TENSORFOLD_CUDA_WGMMA_GEMM` = 2 or 3
/// (default 3: 192 outputs × 64 rows a block, one block an SM), or 0 to keep the mma.sync prompt kernel
/// (project_gemm.cu; for same-run comparisons, the bits are the same). Calls 116 and 117, 16k prefills with 3
/// and 2: 27B bf16 1,917 and 1,865 tok/s; 27B MLX4 1,722 and 1,642 (its 4-bit build of 3 spills 24 bytes, and
/// is faster all the same). bf16 chunks of more than 64 rows take the wide build instead (wide_bf16).
fn wgmma_gemm_warpgroups() -> usize {
    static WGS: OnceLock<usize> = OnceLock::new();
    *WGS.get_or_init(
        || match std::env::var("TENSORFOLD_CUDA_WGMMA_GEMM").as_deref() {
            Ok("0") => 0,
            Ok("2") => 2,
            _ => 3,
        },
    )
}

/// Whether a bf16 prompt chunk of `rows` rows takes the wide wgmma build: 2 warpgroups over 128 outputs × 128
/// rows a block (project_wgmma_gemm_pipe.cu says why), the same bits. The default for chunks of more than 64 rows
/// (call 185, an H100: 27B bf16 prefill 2k 3,816–3,844 tok/s against 3,368–3,414 on blocks of 3 warpgroups, 16k
/// 2,592 against 2,404); a chunk of up to 64 rows fills one block of the narrow build, which reads the weights
/// once too, and keeps it (not timed apart). `TENSORFOLD_CUDA_WGMMA_GEMM=3` (or 2) keeps the narrow build for
/// every chunk, for same-run comparisons.
fn wide_bf16(rows: usize) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON.get_or_init(|| {
        std::env::var("TENSORFOLD_CUDA_WGMMA_GEMM")
            .as_deref()
            .map_or(true, |v| v == "wide")
    });
    on && rows > 64
}

/// How a wgmma prompt kernel is launched: a block's outputs, rows and threads, its dynamic shared memory.
struct GemmShape {
    outputs: usize,
    rows: usize,
    threads: usize,
    smem: usize,
}

/// The wide bf16 build's kernel.
const WIDE_BF16: &str = "project_wgmma_gemm_bf16_w2n256";

/// The launch of wgmma prompt kernel `name`: blocks of `wgs` warpgroups over 64·wgs outputs × 64 rows, 4 stages
/// (5 for bf16 weights: GWG_BF16_PIPE_STAGES, the pipelined walk; built with TF_GEMM_SERIAL it uses 4); the wide
/// build 2 warpgroups over 128 × 128, 4 stages (GWG_WIDE_STAGES).
fn gemm_shape(name: &str, wgs: usize, q4: bool) -> GemmShape {
    let (outputs, rows, threads, stages) = if name == WIDE_BF16 {
        (128, 128, 256, 4)
    } else {
        (64 * wgs, 64, 128 * wgs, if q4 { 4 } else { 5 })
    };
    GemmShape {
        outputs,
        rows,
        threads,
        smem: wgmma_gemm_smem(outputs, rows, stages, q4),
    }
}

/// Whether the wgmma prompt kernel is switched on (it runs where the device has the wgmma kernels).
pub(super) fn wgmma_gemm_on() -> bool {
    wgmma_gemm_warpgroups() > 0
}

/// Whether calls of `rows` rows take the wgmma prompt kernel where the weights allow (the device permitting):
/// prompt chunks (gemm_for), unless switched off.
pub(super) fn wgmma_gemm_rows(rows: usize) -> bool {
    gemm_for(rows) && wgmma_gemm_on()
}

/// Dynamic shared memory of a wgmma prompt block of `outputs` × `rows` and `stages` stages, as
/// project_wgmma_gemm.cu's GwgStage: a stage holds one group's B tiles (256 bytes a row: 64 columns, hi and lo)
/// and weights, 128 bytes an output of bf16 ones; for 4-bit ones 512 bytes of codes and a 128-byte slot of scales
/// and biases a tile of 16 outputs, and 8 bytes of x sums a row.
fn wgmma_gemm_smem(outputs: usize, rows: usize, stages: usize, q4: bool) -> usize {
    let weights = if q4 {
        outputs / 16 * (512 + 128) + rows * 8
    } else {
        outputs * 128
    };
    stages * (rows * 256 + weights)
}

/// The wgmma prompt kernel standing in for prompt kernel `gemm` (bf16, or 4-bit g64 of any scale type) with
/// blocks of `wgs` warpgroups; `None` for the others (4-bit g32), which keep it.
fn wgmma_gemm_name(gemm: &str, wgs: usize) -> Option<String> {
    (gemm == "project_gemm_bf16" || gemm.starts_with("project_gemm_a4_g2_")).then(|| {
        format!(
            "{}_w{wgs}",
            gemm.replace("project_gemm", "project_wgmma_gemm")
        )
    })
}

/// y = x Wᵀ by the wgmma prompt kernel standing in for prompt kernel `gemm`, when there is one, the device has it
/// and x has its B tiles (takes_b_tiles); `None` otherwise. Blocks of 64·WGS outputs × 64 rows, the groups walked in
/// the decode kernels' warp split (mma_warps), so the bits are theirs.
pub(super) fn wgmma_gemm(dev: &Dev, x: &CudaAct, w: &CudaMatrix, gemm: &str) -> Option<CudaAct> {
    let wgs = wgmma_gemm_warpgroups();
    if !dev.wgmma || wgs == 0 {
        return None;
    }
    let name = if gemm == "project_gemm_bf16" && wide_bf16(x.rows) {
        WIDE_BF16.to_string()
    } else {
        wgmma_gemm_name(gemm, wgs)?
    };
    let shape = gemm_shape(&name, wgs, matches!(w, CudaMatrix::Affine { .. }));
    if shape.smem > dev.max_dynamic_smem() {
        return None;
    }
    let tiles = prepared(dev, x).b_tiles.as_ref()?;
    let launch = SplitWalk {
        grid: (
            blocks(w.rows(), shape.outputs),
            blocks(x.rows, shape.rows),
            1,
        ),
        threads: shape.threads as u32,
        smem: shape.smem as u32,
        extra: &[Arg::P(dev.ptr(tiles))],
    };
    Some(launch_split_walk(dev, x, w, &name, launch))
}

/// Notes at upload whether `w` is a matrix the wgmma prompt kernel takes (its prompt kernel has a wgmma one: bf16,
/// 4-bit g64), so that on a device with the wgmma kernels prompt chunks write x's B tiles from then on
/// (project_wgmma.rs takes_b_tiles).
pub(crate) fn note_wgmma_prompt_matrix(dev: &Dev, w: &CudaMatrix) {
    let takes = || {
        mma_kernel(w)
            .and_then(|family| gemm_kernel(&family))
            .is_some_and(|gemm| wgmma_gemm_name(&gemm, wgmma_gemm_warpgroups()).is_some())
    };
    if dev.wgmma && takes() {
        dev.prompt_b_tiles
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// x Wᵀ by the wgmma prompt kernel, where the device, the matrix and x's form allow it (wgmma_gemm); `None`
/// otherwise. The self-test checks that Hopper takes it for the matrices it should.
pub(crate) fn project_wgmma_prompt(dev: &Dev, x: &CudaAct, w: &CudaMatrix) -> Option<CudaAct> {
    let gemm = gemm_kernel(&mma_kernel(w)?)?;
    wgmma_gemm(dev, x, w, &gemm)
}

/// Whether the wgmma prompt kernel is on and x's form of `rows` × `cols` gets the B tiles it reads, so that it takes
/// the matrices it can (the self-test's expectation).
pub(crate) fn wgmma_prompt_expected(dev: &Dev, rows: usize, cols: usize) -> bool {
    super::mma_enabled() && wgmma_gemm_on() && super::wgmma::takes_b_tiles(dev, rows, cols)
}

#[cfg(test)]
mod tests {
    use super::{gemm_kernel, gemm_shape, wgmma_gemm_name, WIDE_BF16};
    use crate::device::kernel_names;

    /// Asserts that prompt kernel `name` is built and its stages fit Hopper's opt-in limit of 227 KB a block, of
    /// which the system takes 1 KB.
    fn prompt_kernel_fits(module: &[String], name: &str, wgs: usize, q4: bool) {
        assert!(module.iter().any(|k| k == name), "{name} is not built");
        let smem = gemm_shape(name, wgs, q4).smem;
        assert!(smem <= 226 * 1024, "{name}: {smem} bytes");
    }

    #[test]
    fn every_wgmma_prompt_kernel_the_dispatch_names_is_built_and_its_stages_fit_hoppers_shared_memory(
    ) {
        let module = kernel_names();
        let mut prompt = vec!["project_gemm_bf16".to_string()];
        for dt in ["f32", "f16", "bf16"] {
            prompt.push(format!("project_gemm_a4_g2_{dt}"));
            assert_eq!(
                wgmma_gemm_name(&format!("project_gemm_a4_g1_{dt}"), 3),
                None
            );
        }
        for gemm in &prompt {
            for wgs in [2, 3] {
                let name = wgmma_gemm_name(gemm, wgs).expect("a wgmma prompt kernel");
                prompt_kernel_fits(&module, &name, wgs, gemm.contains("_a4_"));
            }
        }
        prompt_kernel_fits(&module, WIDE_BF16, 2, false);
        // The kernels' own sizes (GwgStage): the default 3-warpgroup bf16 block 5 × (16 + 24) KB, the 4-bit one
        // 4 × (16 KB + 12 tiles' 640 bytes + 512), the wide build 4 × (32 + 16) KB.
        assert_eq!(
            gemm_shape("project_wgmma_gemm_bf16_w3", 3, false).smem,
            5 * 40960
        );
        assert_eq!(
            gemm_shape("project_wgmma_gemm_a4_g2_bf16_w3", 3, true).smem,
            4 * (16384 + 12 * 640 + 512)
        );
        assert_eq!(gemm_shape(WIDE_BF16, 2, false).smem, 4 * 49152);
    }

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
