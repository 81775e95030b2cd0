//! The backend-ops test's zero-sign check: a 4-bit projection whose outputs are signed zeros gives the same bits on
//! every kernel family (decode stream, direct loads, wgmma rounds, both prompt kernels).
//!
//! Why: a 4-bit group's sum starts from a C of +0 on the mma.sync kernels and from no C at all on the wgmma ones
//! (project_mma.cu FRESH_GROUPS). The two can differ only where a group's products are all zero, if the tensor cores
//! gave such a sum as −0 without C, and that reaches an output only when the output's running sum is already −0,
//! which takes an underflow. Random inputs never meet that case; these rows do, so a device whose zero sums keep a
//! sign fails here (on an H100 every path gave +0, call 161).

use super::{act, Report};
use crate::CudaBackend;
use tensorfold_backend::Backend;
use tensorfold_core::{Bytes, DenseDType, StoredMatrix};

/// Outputs (past 1,024, so rounds of 5 to 64 rows take the wgmma kernels) and columns (32 groups of 64).
const OUT: usize = 1040;
const COLS: usize = 2048;
/// Groups whose sums underflow to −0: the first 16, so that every residue (up to 16 warps split the groups) starts
/// with them; the other 16 groups see x = 0.
const TINY_GROUPS: usize = 16;

/// Every code 7 (centred: −1), so a group of x = +0 has products of −0 only. Tiny groups: scale 2^-60 and centred
/// bias −2^-60 (bias −9·2^-60), so with x = 2^-100 each fma of the fold is −2^-154 exactly, which rounds to −0.
/// Zero groups: scale 1 and centred bias −1, so that their terms keep a running −0 as −0 exactly when the group's
/// mma sum is −0 (−1·(+0) = −0, and −0 + −0 = −0 where −0 + +0 = +0).
fn matrix() -> StoredMatrix {
    let groups = COLS / 64;
    let (mut scales, mut biases) = (Vec::new(), Vec::new());
    for _ in 0..OUT {
        for g in 0..groups {
            let tiny = g < TINY_GROUPS;
            let s = if tiny { (-60f32).exp2() } else { 1.0 };
            scales.push(s);
            biases.push(-9.0 * s);
        }
    }
    let bf16 = |v: &[f32]| -> Vec<u8> {
        v.iter()
            .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
            .collect()
    };
    StoredMatrix::Affine {
        bits: 4,
        group_size: 64,
        codes: Bytes::from_vec(vec![0x77; OUT * COLS / 2]),
        scales: Bytes::from_vec(bf16(&scales)),
        biases: Bytes::from_vec(bf16(&biases)),
        scale_dtype: DenseDType::BF16,
        rows: OUT,
        cols: COLS,
    }
}

/// Rows of x: 2^-100 in the tiny groups' columns, +0 in the others.
fn rows(n: usize) -> Vec<f32> {
    let row: Vec<f32> = (0..COLS)
        .map(|c| {
            if c < TINY_GROUPS * 64 {
                (-100f32).exp2()
            } else {
                0.0
            }
        })
        .collect();
    row.repeat(n)
}

/// Every path's outputs for these rows against the decode kernels' (one row on the weight stream), bit for bit; and
/// that those outputs are zeros at all (else the rows test nothing). The line says which zero this device gave.
pub(super) fn check_zero_groups(rep: &mut Report, gpu: &CudaBackend) {
    let w = gpu.matrix(&matrix()).expect("upload");
    let one = gpu.to_host(&gpu.project(&act(gpu, 1, COLS, &rows(1)), &w));
    let zeros = one.iter().filter(|v| **v == 0.0).count();
    let negative = one.iter().filter(|v| v.to_bits() == 0x8000_0000).count();
    rep.none_differ(
        &format!("zero-sign rows: the decode kernels' outputs are zeros ({negative} of them −0)"),
        OUT - zeros,
        OUT,
    );
    // Direct loads (project_mma.cu) at 1 to 4 rows (from 5 rows the wgmma kernels take these outputs); the default
    // kernels at 2 to 4 rows (the weight stream), 5 to 64 (the wgmma round kernels) and 65 or more (prompt chunks).
    for n in [1usize, 2, 4, 6, 9, 16, 17, 32, 64, 65, 130] {
        let xa = act(gpu, n, COLS, &rows(n));
        let want: Vec<f32> = one.iter().copied().cycle().take(n * OUT).collect();
        // (One row on the default kernels is the reference itself.)
        let mut paths = Vec::new();
        if n > 1 {
            paths.push(("the default kernels", gpu.project(&xa, &w)));
        }
        if n <= 4 {
            paths.push(("direct loads", gpu.project_staged(&xa, &w, 0)));
        }
        if n >= 65 {
            paths.push((
                "the mma.sync prompt kernel",
                gpu.project_layout(&xa, &w, 0, true),
            ));
            if let Some(y) = gpu.project_wgmma_prompt(&xa, &w) {
                paths.push(("the wgmma prompt kernel", y));
            }
        }
        for (what, y) in paths {
            let y = gpu.to_host(&y);
            rep.same(
                &format!("zero-sign rows: {what}, {n} rows, vs one row on the decode kernels"),
                &y,
                &want,
            );
        }
    }
}
