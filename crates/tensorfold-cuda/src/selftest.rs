//! The backend-ops test run on the GPU machine: every CUDA op against its CPU twin on fresh random inputs (a
//! tolerance per format), and row-invariance bit for bit (a row alone vs among 1..64 others, in chains and trees).

use crate::CudaBackend;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::Backend;
use tensorfold_core::{Bytes, DenseDType, MatrixRef, StoredMatrix};

#[path = "selftest_draws.rs"]
mod draws;
#[path = "selftest_mix.rs"]
mod mix;
#[path = "selftest_norms.rs"]
mod norms;
#[path = "selftest_pairs.rs"]
mod pairs;
#[path = "selftest_signs.rs"]
mod signs;

/// `f()` with the test switch `flag` on (a choice of kernels the backend-ops test flips), then off again.
pub(crate) fn with<T>(flag: &std::sync::atomic::AtomicBool, f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::Ordering;
    flag.store(true, Ordering::Relaxed);
    let r = f();
    flag.store(false, Ordering::Relaxed);
    r
}

/// What the run found: one line per check, and the failures among them.
#[derive(Default, Debug)]
pub struct Report {
    pub lines: Vec<String>,
    pub failures: Vec<String>,
}

impl Report {
    /// Records a comparison against the CPU twin: `err` = max |cuda − cpu| / max |cpu|.
    pub(crate) fn close(&mut self, what: &str, err: f64, tol: f64) {
        let ok = err.is_finite() && err <= tol;
        let line = format!(
            "{} {what}: rel err {err:.2e} (tol {tol:.0e})",
            if ok { "ok  " } else { "FAIL" }
        );
        if !ok {
            self.failures.push(line.clone());
        }
        self.lines.push(line);
    }
    /// Records a token-for-token comparison.
    pub(crate) fn same_ids(&mut self, what: &str, a: &[u32], b: &[u32]) {
        let diff = a.iter().zip(b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
        let line = if diff == 0 {
            format!("ok   {what}: {} of {} equal", a.len(), b.len())
        } else {
            format!("FAIL {what}: {diff} of {} differ", b.len())
        };
        if diff != 0 {
            self.failures.push(line.clone());
        }
        self.lines.push(line);
    }
    /// Records that `bad` of `of` compared items differ (none should).
    pub(crate) fn none_differ(&mut self, what: &str, bad: usize, of: usize) {
        let line = if bad == 0 {
            format!("ok   {what}: {of} of {of} equal")
        } else {
            format!("FAIL {what}: {bad} of {of} differ")
        };
        if bad != 0 {
            self.failures.push(line.clone());
        }
        self.lines.push(line);
    }
    /// Records a bit-for-bit comparison; a failure says how many values differ, where the first is, and the
    /// largest difference (a few ulps from an order of sums, or garbage from a layout).
    pub(crate) fn same(&mut self, what: &str, a: &[f32], b: &[f32]) {
        let differ: Vec<usize> = (0..a.len().min(b.len()))
            .filter(|&i| a[i].to_bits() != b[i].to_bits())
            .collect();
        let diff = a.len() != b.len() || !differ.is_empty();
        let detail = match differ.first() {
            Some(&i) => {
                let worst = differ
                    .iter()
                    .map(|&k| (a[k] - b[k]).abs())
                    .fold(0.0f32, f32::max);
                format!(
                    "bits differ ({} of {}; first at {i}: {} vs {}; largest difference {worst:e})",
                    differ.len(),
                    a.len(),
                    a[i],
                    b[i]
                )
            }
            None if diff => format!("lengths differ ({} vs {})", a.len(), b.len()),
            None => "bit-equal".to_string(),
        };
        let line = format!("{} {what}: {detail}", if diff { "FAIL" } else { "ok  " });
        if diff {
            self.failures.push(line.clone());
        }
        self.lines.push(line);
    }
}

/// xorshift64* values in [-1, 1).
pub(crate) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.unit() * scale).collect()
    }
}

pub(crate) fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let scale = want
        .iter()
        .fold(0f64, |m, &v| m.max(v.abs() as f64))
        .max(1e-30);
    let d = got.iter().zip(want).fold(0f64, |m, (&a, &b)| {
        if a.is_nan() {
            f64::INFINITY
        } else {
            m.max((a as f64 - b as f64).abs())
        }
    });
    d / scale
}

fn encode(dtype: DenseDType, v: &[f32]) -> Vec<u8> {
    match dtype {
        DenseDType::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DenseDType::F16 => v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect(),
        DenseDType::BF16 => v
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect(),
    }
}

pub(crate) fn dense(dtype: DenseDType, rows: usize, cols: usize, data: &[f32]) -> StoredMatrix {
    StoredMatrix::Dense {
        dtype,
        data: Bytes::from_vec(encode(dtype, data)),
        rows,
        cols,
    }
}

pub(crate) fn affine(
    rng: &mut Rng,
    bits: u32,
    gs: usize,
    sd: DenseDType,
    rows: usize,
    cols: usize,
) -> StoredMatrix {
    let codes: Vec<u8> = (0..rows * cols * bits as usize / 8)
        .map(|_| rng.next() as u8)
        .collect();
    let ng = rows * cols / gs;
    let scales: Vec<f32> = (0..ng).map(|_| 0.02 + 0.01 * rng.unit()).collect();
    let biases = rng.vec(ng, 0.1);
    StoredMatrix::Affine {
        bits,
        group_size: gs,
        codes: Bytes::from_vec(codes),
        scales: Bytes::from_vec(encode(sd, &scales)),
        biases: Bytes::from_vec(encode(sd, &biases)),
        scale_dtype: sd,
        rows,
        cols,
    }
}

/// Activations `[rows, cols]` equal to `data` on any backend (an f32 table looked up row by row: exact).
pub(crate) fn act<B: Backend>(be: &B, rows: usize, cols: usize, data: &[f32]) -> B::Act {
    let table = be
        .matrix(&dense(DenseDType::F32, rows, cols, data))
        .expect("upload");
    let ids: Vec<u32> = (0..rows as u32).collect();
    be.embed(&table, &ids)
}

/// Row subsets a row is checked in: alone, and among 1, 2, 7, 8, 9, 31, 63 others at various places.
fn subsets(n: usize) -> Vec<Vec<usize>> {
    let mut v = vec![
        vec![5],
        vec![5, 6],
        vec![0, 5, 63],
        (0..8).collect(),
        (0..9).collect(),
        (10..27).collect(),
        (3..35).collect(),
    ];
    v.push((0..n).rev().collect());
    v.retain(|s| s.iter().all(|&r| r < n));
    v
}

fn check_projection(
    rep: &mut Report,
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    rng: &mut Rng,
    name: &str,
    m: StoredMatrix,
) {
    let (out_f, cols) = (m.rows(), m.cols());
    let n = 64;
    let x = rng.vec(n * cols, 1.0);
    let want = cpu.to_host(&cpu.project(&act(cpu, n, cols, &x), &cpu.matrix(&m).expect("cpu")));
    let w = gpu.matrix(&m).expect("upload");
    let got = gpu.to_host(&gpu.project(&act(gpu, n, cols, &x), &w));
    let tol = if name.contains("f32") && !name.contains("bit") {
        2e-5
    } else {
        5e-5
    };
    rep.close(
        &format!("project {name} {out_f}x{cols}, 64 rows vs cpu"),
        rel_err(&got, &want),
        tol,
    );
    let mut same = true;
    for s in subsets(n) {
        let xs: Vec<f32> = s
            .iter()
            .flat_map(|&r| x[r * cols..(r + 1) * cols].iter().copied())
            .collect();
        let ys = gpu.to_host(&gpu.project(&act(gpu, s.len(), cols, &xs), &w));
        for (j, &r) in s.iter().enumerate() {
            let a = &ys[j * out_f..(j + 1) * out_f];
            let b = &got[r * out_f..(r + 1) * out_f];
            same &= a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits());
        }
    }
    let (a, b) = if same {
        (vec![0.0], vec![0.0])
    } else {
        (vec![0.0], vec![1.0])
    };
    rep.same(
        &format!("project {name}: rows alone / among 1..64 others"),
        &a,
        &b,
    );
    // The 4-bit weight stream's pipeline depths (project_stream.cu) against the direct loads (project_mma.cu):
    // the same arithmetic, so the same bits, on 1, 6, 9 and 64 rows.
    if name.contains("4-bit") {
        for rows in [1usize, 6, 9, 64] {
            let xa = act(gpu, rows, cols, &x[..rows * cols]);
            let direct = gpu.to_host(&gpu.project_staged(&xa, &w, 0));
            for stages in [4usize, 8, 2, 1] {
                let streamed = gpu.to_host(&gpu.project_staged(&xa, &w, stages));
                rep.same(
                    &format!(
                        "project {name}: {} stream vs direct loads, {rows} rows",
                        stream_name(stages)
                    ),
                    &streamed,
                    &direct,
                );
            }
        }
    }
}

/// A 4-bit stream layout by its TENSORFOLD_CUDA_MMA_STAGES value.
fn stream_name(stages: usize) -> &'static str {
    match stages {
        1 => "default (by rows)",
        2 => "4-stage two-tile",
        8 => "8-stage",
        _ => "4-stage",
    }
}

fn check_rowwise(rep: &mut Report, cpu: &CpuBackend, gpu: &CudaBackend, rng: &mut Rng) {
    let (n, cols) = (33, 300);
    let x = rng.vec(n * cols, 2.0);
    let y = rng.vec(n * cols, 2.0);
    let w = rng.vec(cols, 1.0);
    let (xc, yc) = (act(cpu, n, cols, &x), act(cpu, n, cols, &y));
    let (xg, yg) = (act(gpu, n, cols, &x), act(gpu, n, cols, &y));
    rep.close(
        "embed f32 (exact copy)",
        rel_err(&gpu.to_host(&xg), &x),
        0.0,
    );
    let (wc, wg) = (cpu.vector(&w).expect("cpu"), gpu.vector(&w).expect("gpu"));
    let nc = cpu.to_host(&cpu.rms_norm(&xc, &wc, 1e-6));
    let ng = gpu.to_host(&gpu.rms_norm(&xg, &wg, 1e-6));
    rep.close("rms_norm", rel_err(&ng, &nc), 1e-5);
    let one = gpu.to_host(&gpu.rms_norm(&act(gpu, 1, cols, &x[7 * cols..8 * cols]), &wg, 1e-6));
    rep.same(
        "rms_norm: a row alone vs among 32 others",
        &one,
        &ng[7 * cols..8 * cols],
    );
    let sc = cpu.to_host(&cpu.swiglu(&xc, &yc));
    let sg = gpu.to_host(&gpu.swiglu(&xg, &yg));
    rep.close("swiglu", rel_err(&sg, &sc), 1e-5);
    let (mut ac, mut ag) = (act(cpu, n, cols, &x), act(gpu, n, cols, &x));
    cpu.add_assign(&mut ac, &yc);
    gpu.add_assign(&mut ag, &yg);
    rep.close(
        "add_assign",
        rel_err(&gpu.to_host(&ag), &cpu.to_host(&ac)),
        0.0,
    );
    let pick = [4usize, 0, 32, 4];
    rep.close(
        "select_rows",
        rel_err(
            &gpu.to_host(&gpu.select_rows(&xg, &pick)),
            &cpu.to_host(&cpu.select_rows(&xc, &pick)),
        ),
        0.0,
    );
}

/// rms_norm, add_rms_norm and swiglu write their output's tensor-core form as they go; a projection
/// of that output must equal, bit for bit, the projection of the same values prepared by prepare_x.
fn check_fused_prepare(rep: &mut Report, gpu: &CudaBackend, rng: &mut Rng) {
    let (n, cols, out_f) = (9, 256, 24);
    let w = gpu
        .matrix(&dense(
            DenseDType::BF16,
            out_f,
            cols,
            &rng.vec(out_f * cols, 0.5),
        ))
        .expect("upload");
    let x = act(gpu, n, cols, &rng.vec(n * cols, 2.0));
    let u = act(gpu, n, cols, &rng.vec(n * cols, 2.0));
    let nw = gpu.vector(&rng.vec(cols, 1.0)).expect("gpu");
    // add_rms_norm against add_assign then rms_norm: the same residual and the same normed rows.
    let (mut h1, mut h2) = (
        act(gpu, n, cols, &gpu.to_host(&x)),
        act(gpu, n, cols, &gpu.to_host(&x)),
    );
    let fused_norm = gpu.add_rms_norm(&mut h1, &u, &nw, 1e-6);
    gpu.add_assign(&mut h2, &u);
    let two_ops = gpu.rms_norm(&h2, &nw, 1e-6);
    rep.same(
        "add_rms_norm == add_assign then rms_norm (normed rows)",
        &gpu.to_host(&fused_norm),
        &gpu.to_host(&two_ops),
    );
    rep.same(
        "add_rms_norm == add_assign then rms_norm (the residual)",
        &gpu.to_host(&h1),
        &gpu.to_host(&h2),
    );
    for (what, y) in [
        ("rms_norm", gpu.rms_norm(&x, &nw, 1e-6)),
        ("swiglu", gpu.swiglu(&x, &u)),
        ("add_rms_norm", fused_norm),
    ] {
        let fused = gpu.to_host(&gpu.project(&y, &w));
        let fresh = act(gpu, n, cols, &gpu.to_host(&y));
        let plain = gpu.to_host(&gpu.project(&fresh, &w));
        rep.same(
            &format!("{what}'s own tensor-core form projects as prepare_x's"),
            &fused,
            &plain,
        );
    }
}

fn check_embed(
    rep: &mut Report,
    cpu: &CpuBackend,
    gpu: &CudaBackend,
    name: &str,
    m: &StoredMatrix,
) {
    let ids: Vec<u32> = (0..m.rows() as u32).rev().step_by(3).collect();
    let want = cpu.to_host(&cpu.embed(&cpu.matrix(m).expect("cpu"), &ids));
    let got = gpu.to_host(&gpu.embed(&gpu.matrix(m).expect("gpu"), &ids));
    rep.close(&format!("embed {name}"), rel_err(&got, &want), 1e-6);
}

/// Runs every check; never panics on a mismatch (a device error inside an op still panics).
pub fn run(gpu: &CudaBackend) -> Report {
    let cpu = CpuBackend::default();
    let mut rep = Report::default();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ std::process::id() as u64);
    rep.lines.push(format!("device: {}", gpu.info()));
    // `TENSORFOLD_CUDA_OPS=attention,draws` runs only those groups (rowwise, projections, pairs, prompt,
    // attention, deltanet, draws; mixers = attention and deltanet): the CPU emulator takes long over the whole test.
    const GROUPS: [&str; 8] = [
        "rowwise",
        "projections",
        "pairs",
        "prompt",
        "attention",
        "deltanet",
        "mixers",
        "draws",
    ];
    let only = std::env::var("TENSORFOLD_CUDA_OPS").ok();
    // A misspelt group would run nothing and pass: it fails the test instead.
    for g in only.iter().flat_map(|v| v.split(',')) {
        if !GROUPS.contains(&g) {
            rep.lines.push(format!(
                "FAIL TENSORFOLD_CUDA_OPS: no group {g:?} (groups: {})",
                GROUPS.join(", ")
            ));
            rep.failures
                .push(format!("TENSORFOLD_CUDA_OPS group {g:?}"));
        }
    }
    let wanted = |group: &str| {
        only.as_deref()
            .is_none_or(|v| v.split(',').any(|g| g == group))
    };
    if wanted("rowwise") {
        check_rowwise(&mut rep, &cpu, gpu, &mut rng);
        check_fused_prepare(&mut rep, gpu, &mut rng);
        norms::check_norm_clusters(&mut rep, &cpu, gpu, &mut rng);
    }
    if wanted("projections") {
        check_projections(&mut rep, &cpu, gpu, &mut rng);
        signs::check_zero_groups(&mut rep, gpu);
    }
    if wanted("pairs") {
        pairs::check_pairs(&mut rep, gpu, &mut rng);
        pairs::check_unsplit(&mut rep, gpu, &mut rng);
    }
    if wanted("prompt") {
        check_prompt_kernel(&mut rep, gpu, &mut rng);
    }
    if wanted("attention") || wanted("mixers") {
        mix::check_attention(&mut rep, &cpu, gpu, &mut rng);
    }
    if wanted("deltanet") || wanted("mixers") {
        mix::check_deltanet(&mut rep, &cpu, gpu, &mut rng);
    }
    if wanted("draws") {
        draws::check_draws(&mut rep, gpu, &mut rng);
        draws::check_cut_draws(&mut rep, gpu, &mut rng);
    }
    rep
}

/// Every weight format's projection against its CPU twin, and the weight stream's layouts against direct loads.
fn check_projections(rep: &mut Report, cpu: &CpuBackend, gpu: &CudaBackend, rng: &mut Rng) {
    for dt in [DenseDType::F32, DenseDType::F16, DenseDType::BF16] {
        // (40, 1024): enough column groups that the tensor-core kernels split them over several warps.
        for (out_f, cols) in [(37usize, 256usize), (21, 100), (9, 72), (40, 1024)] {
            let data = rng.vec(out_f * cols, 0.5);
            let m = dense(dt, out_f, cols, &data);
            check_projection(
                rep,
                cpu,
                gpu,
                rng,
                &format!("dense {}", dt.name()),
                m.clone(),
            );
            if cols == 256 {
                check_embed(rep, cpu, gpu, &format!("dense {}", dt.name()), &m);
            }
        }
    }
    // bf16 matrices of 1,024 outputs or more: on Hopper their rounds of 5 to 64 rows take the wgmma kernel
    // (project_wgmma_bf16.cu), so rows alone (the decode kernels) against among others check it bit for bit; 21
    // column groups over 5 warps (uneven residues) and 32 over 8.
    for cols in [1344usize, 2048] {
        let m = dense(DenseDType::BF16, 1040, cols, &rng.vec(1040 * cols, 0.5));
        check_projection(rep, cpu, gpu, rng, "dense BF16", m);
    }
    for bits in [2u32, 3, 4, 5, 6, 8] {
        for (gs, sd) in [
            (64usize, DenseDType::BF16),
            (32, DenseDType::F16),
            (128, DenseDType::F32),
        ] {
            let m = affine(rng, bits, gs, sd, 37, 256);
            let name = format!("MLX {bits}-bit g{gs} {}", sd.name());
            check_projection(rep, cpu, gpu, rng, &name, m.clone());
            check_embed(rep, cpu, gpu, &name, &m);
            if bits == 4 {
                let wide = affine(rng, bits, gs, sd, 40, 1024);
                check_projection(rep, cpu, gpu, rng, &name, wide);
                // Enough groups per warp (8 to 32) that the weight stream's stages are reused many times.
                let long = affine(rng, bits, gs, sd, 20, 8192);
                check_projection(rep, cpu, gpu, rng, &name, long);
                // 35 groups over 8 warps, 5 for the first three and 4 for the others: the weight stream runs its
                // loop D stages a trip, then the groups left over.
                let odd = affine(rng, bits, gs, sd, 20, 35 * gs);
                check_projection(rep, cpu, gpu, rng, &name, odd);
            }
        }
    }
    // Groups of 64 with f16 and f32 scales over 8 warps (the kernels built for exactly 8 warps, project_stream.cu's
    // `_w8`, are for groups of 64 only).
    for sd in [DenseDType::F16, DenseDType::F32] {
        let m = affine(rng, 4, 64, sd, 20, 35 * 64);
        check_projection(
            rep,
            cpu,
            gpu,
            rng,
            &format!("MLX 4-bit g64 {}", sd.name()),
            m,
        );
    }
    // A matrix of more than 1024 outputs (8 warps a block): the weight stream's layouts against the direct loads.
    let big = affine(rng, 4, 64, DenseDType::BF16, 1040, 2048);
    // Its rows alone / among others also put rounds of 8, 9, 17 and 32 rows on the wgmma kernels where the device has
    // them (Hopper: 1,024 outputs or more) against 1-row rounds on the weight stream.
    check_projection(rep, cpu, gpu, rng, "MLX 4-bit g64 BF16", big.clone());
    let wb = gpu.matrix(&big).expect("upload");
    for rows in [1usize, 9] {
        let xa = act(gpu, rows, 2048, &rng.vec(rows * 2048, 1.0));
        let direct = gpu.to_host(&gpu.project_staged(&xa, &wb, 0));
        for stages in [4usize, 8, 2, 1] {
            rep.same(
                &format!(
                    "project MLX 4-bit g64 1040x2048: {} stream vs direct loads, {rows} rows",
                    stream_name(stages)
                ),
                &gpu.to_host(&gpu.project_staged(&xa, &wb, stages)),
                &direct,
            );
        }
    }
}

/// The prompt kernel (project_gemm.cu) against the decode kernels' direct loads, bit for bit: bf16 and MLX 4-bit
/// weights in groups of 32 and 64 with every scale type, outputs and rows that fill no whole block, and column
/// groups split over warps evenly and unevenly (21 groups over 5 warps).
fn check_prompt_kernel(rep: &mut Report, gpu: &CudaBackend, rng: &mut Rng) {
    let mut cases: Vec<(String, StoredMatrix, &[usize])> = Vec::new();
    for (out_f, cols) in [(72usize, 1344usize), (40, 1024)] {
        let m = dense(DenseDType::BF16, out_f, cols, &rng.vec(out_f * cols, 0.5));
        cases.push((format!("bf16 {out_f}x{cols}"), m, &[9, 130]));
    }
    for (gs, sd) in [
        (64usize, DenseDType::BF16),
        (32, DenseDType::F16),
        (64, DenseDType::F32),
    ] {
        for (out_f, cols) in [(72usize, 1344usize), (40, 1024)] {
            let name = format!("MLX 4-bit g{gs} {} {out_f}x{cols}", sd.name());
            cases.push((name, affine(rng, 4, gs, sd, out_f, cols), &[9, 130]));
        }
    }
    // More than 1024 outputs: 8 warps split the groups, as in the real models.
    let big = affine(rng, 4, 64, DenseDType::BF16, 1040, 2048);
    cases.push(("MLX 4-bit g64 BF16 1040x2048".into(), big, &[1, 70]));
    for (name, m, row_counts) in cases {
        let cols = m.cols();
        let w = gpu.matrix(&m).expect("upload");
        // Where the device has the wgmma kernels (Hopper), bf16 and 4-bit g64 matrices must take the wgmma prompt
        // kernel whenever x has its B tiles (rounds the wgmma kernels take, prompt chunks), so the checks above
        // reach it.
        let wgmma_takes = match m.view() {
            MatrixRef::Dense { dtype, .. } => dtype == DenseDType::BF16,
            MatrixRef::Affine {
                bits, group_size, ..
            } => bits == 4 && group_size == 64,
        };
        for &rows in row_counts {
            let xa = act(gpu, rows, cols, &rng.vec(rows * cols, 1.0));
            let decode = gpu.to_host(&gpu.project_layout(&xa, &w, 0, false));
            rep.same(
                &format!("project {name}: prompt kernel vs decode kernels, {rows} rows"),
                &gpu.to_host(&gpu.project_layout(&xa, &w, 0, true)),
                &decode,
            );
            if wgmma_takes && crate::project::wgmma_prompt_expected(&gpu.dev, rows, cols) {
                let what = format!("project {name}: the wgmma prompt kernel takes {rows} rows");
                match gpu.project_wgmma_prompt(&xa, &w) {
                    Some(y) => rep.same(&what, &gpu.to_host(&y), &decode),
                    None => rep.none_differ(&what, 1, 1),
                }
            }
        }
    }
}
