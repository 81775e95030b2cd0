//! The shared-launch checks of the backend-ops test: matrices sharing an input (project_many) give each output the
//! bits of its own projection, in the launches expected; and rounds on blocks of two warpgroups give each row its
//! bits alone.

use super::{act, affine, dense, Report, Rng};
use crate::{CudaBackend, CudaMatrix};
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

/// Rounds of 9 to 16 rows (and for three of the cases, 24 and 40) on the wgmma kernels' blocks of two warpgroups
/// (`_wg2` in project_wgmma.cu and project_wgmma_bf16.cu), whatever the environment says: each row's outputs bit for
/// bit those of the row alone (the decode kernels), for a 4-bit matrix of each scale type (35 groups over 8 warps:
/// residues of 5 and 4 groups), four sharing a launch, and bf16 ones; on a device with the wgmma kernels, the rounds
/// it takes them for must have reached them. The 4-bit rounds run twice: with blocks of half as many outputs held
/// off (these launches fill less than a wave, so would take them: `_m1`), so on `_wg2`, then let in, so on
/// `_m1_wg2`.
pub(super) fn check_two_warpgroups(rep: &mut Report, gpu: &CudaBackend, rng: &mut Rng) {
    use crate::project::{M1, WG2};
    use std::sync::atomic::Ordering;
    let mut cases: Vec<(String, Vec<StoredMatrix>)> =
        [DenseDType::BF16, DenseDType::F16, DenseDType::F32]
            .into_iter()
            .map(|sd| {
                // bf16 scales: 2,080 outputs, nine blocks of 256, the last partial.
                let outs = if sd == DenseDType::BF16 { 2080 } else { 1040 };
                let name = format!("MLX 4-bit g64 {} {outs}x{}", sd.name(), 35 * 64);
                (name, vec![affine(rng, 4, 64, sd, outs, 35 * 64)])
            })
            .collect();
    let shared = [1040usize, 640, 48, 48].map(|o| affine(rng, 4, 64, DenseDType::BF16, o, 2048));
    cases.push((
        "MLX 4-bit g64 bf16 1040+640+48+48 x2048".into(),
        shared.to_vec(),
    ));
    // bf16 weights (their rounds take wgmma from 10 rows): 21 groups over 5 warps, and two sharing a launch.
    let bf16 = |rng: &mut Rng, o: usize, cols: usize| {
        dense(DenseDType::BF16, o, cols, &rng.vec(o * cols, 0.5))
    };
    cases.push(("bf16 1040x1344".into(), vec![bf16(rng, 1040, 1344)]));
    let pair = vec![bf16(rng, 1040, 2048), bf16(rng, 1088, 2048)];
    cases.push(("bf16 1040+1088 x2048".into(), pair));
    let held = (WG2.swap(1, Ordering::Relaxed), M1.load(Ordering::Relaxed));
    for (name, ms) in cases {
        let ws: Vec<_> = ms.iter().map(|m| gpu.matrix(m).expect("upload")).collect();
        let halves: &[bool] = if name.starts_with("MLX") {
            &[false, true]
        } else {
            &[false]
        };
        for &half in halves {
            M1.store(if half { 1 } else { 2 }, Ordering::Relaxed);
            let label = if half {
                format!("{name} (blocks of half)")
            } else {
                name.clone()
            };
            // Rounds of 24 and 40 rows (the 64-column build; 40 in two parts of 32 rows) for three of the cases.
            let wide = !half
                && (name.contains(" F16 ")
                    || name.contains("1040+640")
                    || name == "bf16 1040x1344");
            let row_counts: &[usize] = if wide {
                &[9, 12, 16, 24, 40]
            } else {
                &[9, 12, 16]
            };
            for &rows in row_counts {
                check_round_alone(rep, gpu, rng, &label, &ws, rows);
            }
        }
    }
    WG2.store(held.0, Ordering::Relaxed);
    M1.store(held.1, Ordering::Relaxed);
}

/// One round of `rows` random rows through `ws` in one launch (project_many) against each row alone, bit for bit,
/// and whether the round took the two-warpgroup kernels where the device has wgmma (WG2 held on by the caller).
fn check_round_alone(
    rep: &mut Report,
    gpu: &CudaBackend,
    rng: &mut Rng,
    name: &str,
    ws: &[CudaMatrix],
    rows: usize,
) {
    use crate::project::WG2_LAUNCHES;
    use std::sync::atomic::Ordering;
    let cols = ws[0].cols();
    let refs: Vec<_> = ws.iter().collect();
    let x = rng.vec(rows * cols, 1.0);
    let before = WG2_LAUNCHES.load(Ordering::Relaxed);
    let ys = gpu.project_many(&act(gpu, rows, cols, &x), &refs);
    let reached = WG2_LAUNCHES.load(Ordering::Relaxed) - before;
    let got: Vec<f32> = ys.iter().flat_map(|y| gpu.to_host(y)).collect();
    let mut want = vec![Vec::new(); ws.len()];
    for r in 0..rows {
        let alone = act(gpu, 1, cols, &x[r * cols..(r + 1) * cols]);
        for (j, w) in ws.iter().enumerate() {
            want[j].extend(gpu.to_host(&gpu.project(&alone, w)));
        }
    }
    rep.same(
        &format!("project {name}, {rows} rows on two warpgroups a block == each row alone"),
        &got,
        &want.concat(),
    );
    let expected = ws
        .iter()
        .any(|w| crate::project::takes_wgmma(&gpu.dev, w, rows));
    rep.same_ids(
        &format!("project {name}, {rows} rows: launches of two warpgroups a block"),
        &[reached as u32],
        &[u32::from(expected)],
    );
}
