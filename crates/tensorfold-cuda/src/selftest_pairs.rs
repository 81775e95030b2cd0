//! The shared-launch checks of the backend-ops test: matrices sharing an input (project_many) give each output the
//! bits of its own projection, in the launches expected; and the wgmma round kernels' unsplit launches give the bits
//! of split ones.

use super::{act, affine, dense, with, Report, Rng};
use crate::CudaBackend;
use tensorfold_backend::Backend;
use tensorfold_core::{DenseDType, StoredMatrix};

/// Matrices sharing an input run in shared launches (project_many, as qkv, z, b and a do): each output bit for bit
/// its own projection's, on 1, 6, 9, 24 and 64 rows; MLX 4-bit in every group size and bf16; output counts from 20
/// to 1040 in one launch; five matrices (two launches); and a bf16 matrix among 4-bit ones (one launch each).
pub(super) fn check_pairs(rep: &mut Report, gpu: &CudaBackend, rng: &mut Rng) {
    let a4 = |rng: &mut Rng,
              gs: usize,
              sd: DenseDType,
              outs: &[usize],
              cols: usize|
     -> Vec<StoredMatrix> {
        outs.iter()
            .map(|&o| affine(rng, 4, gs, sd, o, cols))
            .collect()
    };
    let mut cases: Vec<(String, Vec<StoredMatrix>)> = vec![
        (
            "MLX 4-bit g64 bf16 37+37".into(),
            a4(rng, 64, DenseDType::BF16, &[37, 37], 256),
        ),
        (
            "MLX 4-bit g32 f16 40+20+1040".into(),
            a4(rng, 32, DenseDType::F16, &[40, 20, 1040], 1024),
        ),
        (
            "MLX 4-bit g128 f32 40+40".into(),
            a4(rng, 128, DenseDType::F32, &[40, 40], 1024),
        ),
        (
            "MLX 4-bit g64 bf16 1040+640+48+48".into(),
            a4(rng, 64, DenseDType::BF16, &[1040, 640, 48, 48], 2048),
        ),
        (
            "MLX 4-bit g64 bf16 five of 20".into(),
            a4(rng, 64, DenseDType::BF16, &[20; 5], 8192),
        ),
    ];
    let bf16: Vec<StoredMatrix> = [72usize, 1040, 24]
        .iter()
        .map(|&o| dense(DenseDType::BF16, o, 1344, &rng.vec(o * 1344, 0.5)))
        .collect();
    cases.push(("bf16 72+1040+24".into(), bf16));
    let mut mixed = a4(rng, 64, DenseDType::BF16, &[40, 40], 1344);
    mixed.insert(
        1,
        dense(DenseDType::BF16, 40, 1344, &rng.vec(40 * 1344, 0.5)),
    );
    cases.push(("4-bit, bf16, 4-bit".into(), mixed));
    // Launches each case takes, up to many_rows rows and above: one per four matrices (above, per four of one
    // shape side by side), one per matrix where formats differ.
    let launches_of = [
        (1usize, 1usize),
        (1, 3),
        (1, 1),
        (1, 3),
        (2, 2),
        (1, 3),
        (3, 3),
    ];
    for ((name, ms), launches_of) in cases.into_iter().zip(launches_of) {
        let cols = ms[0].cols();
        let ws: Vec<_> = ms.iter().map(|m| gpu.matrix(m).expect("upload")).collect();
        let refs: Vec<_> = ws.iter().collect();
        for rows in [1usize, 6, 9, 24, 64] {
            let xa = act(gpu, rows, cols, &rng.vec(rows * cols, 1.0));
            for w in &ws {
                let _ = gpu.project(&xa, w); // x's tensor-core forms, made once
            }
            let before = gpu.launches();
            let ys = gpu.project_many(&xa, &refs);
            let launches = gpu.launches() - before;
            let got: Vec<f32> = ys.iter().flat_map(|y| gpu.to_host(y)).collect();
            let want: Vec<f32> = ws
                .iter()
                .flat_map(|w| gpu.to_host(&gpu.project(&xa, w)))
                .collect();
            rep.same(
                &format!("project_many {name} x{cols}, {rows} rows == one projection each"),
                &got,
                &want,
            );
            // A round the wgmma kernel (on Hopper) takes for any of the matrices takes it for all,
            // in launches of up to four, when they are of one format.
            let wgmma = ws
                .iter()
                .any(|w| crate::project::takes_wgmma(&gpu.dev, w, rows));
            let one_format = ms
                .iter()
                .all(|m| std::mem::discriminant(m) == std::mem::discriminant(&ms[0]));
            let want_launches = if wgmma && one_format {
                ws.len().div_ceil(4)
            } else if rows <= crate::project::many_rows() {
                launches_of.0
            } else {
                launches_of.1
            };
            rep.same_ids(
                &format!("project_many {name} x{cols}, {rows} rows: launches"),
                &[launches as u32],
                &[want_launches as u32],
            );
        }
    }
}

/// The wgmma round kernels' unsplit launches (a block walks every residue, as launches of a wave of blocks or more
/// do) against the split ones the checks' small matrices get by default, bit for bit, alone and sharing a launch:
/// 4-bit g64 with 35 groups over 8 residues (5, 5, 5, 4, …) and bf16 with 21 over 5, at rounds of 6 to 40 rows (16,
/// 32 and 64 columns; 40 rows in two parts of 32). On devices without the wgmma kernels every launch is the decode
/// kernels'.
pub(super) fn check_unsplit(rep: &mut Report, gpu: &CudaBackend, rng: &mut Rng) {
    use crate::project::WHOLE_LAUNCHES;
    let cases: Vec<(&str, Vec<StoredMatrix>)> = vec![
        (
            "MLX 4-bit g64 bf16 1040x2240",
            vec![affine(rng, 4, 64, DenseDType::BF16, 1040, 35 * 64)],
        ),
        (
            "bf16 1040x1344",
            vec![dense(
                DenseDType::BF16,
                1040,
                1344,
                &rng.vec(1040 * 1344, 0.5),
            )],
        ),
        (
            "MLX 4-bit g64 f16 1040+48",
            vec![
                affine(rng, 4, 64, DenseDType::F16, 1040, 35 * 64),
                affine(rng, 4, 64, DenseDType::F16, 48, 35 * 64),
            ],
        ),
    ];
    for (name, ms) in cases {
        let cols = ms[0].cols();
        let ws: Vec<_> = ms.iter().map(|m| gpu.matrix(m).expect("upload")).collect();
        let refs: Vec<_> = ws.iter().collect();
        for rows in [6usize, 9, 16, 24, 40] {
            let xa = act(gpu, rows, cols, &rng.vec(rows * cols, 1.0));
            let run = || -> Vec<f32> {
                gpu.project_many(&xa, &refs)
                    .iter()
                    .flat_map(|y| gpu.to_host(y))
                    .collect()
            };
            let want = run();
            let whole = with(&WHOLE_LAUNCHES, run);
            rep.same(
                &format!("project {name}, {rows} rows: unsplit wgmma == split"),
                &whole,
                &want,
            );
        }
    }
}
