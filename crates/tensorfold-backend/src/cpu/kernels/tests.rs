//! Tests holding every SIMD level's kernels to an f64 reference over dequantized weights, and every output
//! row to the same bits whatever batch, tile, chunk or thread count it was computed in.

use super::project::{matrix_row_with, project_with};
use super::{available_isas, axpy_with, dot_with, Isa};
use proptest::prelude::*;
use tensorfold_core::{DenseDType, MatrixRef};

const DTYPES: [DenseDType; 3] = [DenseDType::F32, DenseDType::F16, DenseDType::BF16];

/// splitmix64: deterministic test data without extra dependencies.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub(super) fn sym(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(super) fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.sym()).collect()
    }
}

/// Stores `v` as little-endian `dtype` bytes (rounding to the dtype).
pub(super) fn encode(dtype: DenseDType, v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * dtype.size());
    for &f in v {
        match dtype {
            DenseDType::F32 => out.extend_from_slice(&f.to_le_bytes()),
            DenseDType::F16 => {
                out.extend_from_slice(&half::f16::from_f32(f).to_bits().to_le_bytes())
            }
            DenseDType::BF16 => {
                out.extend_from_slice(&half::bf16::from_f32(f).to_bits().to_le_bytes())
            }
        }
    }
    out
}

/// Packs codes as one LSB-first bitstream in little-endian u32 words (MLX layout), bit by bit.
pub(super) fn pack_codes(codes: &[u32], bits: u32) -> Vec<u8> {
    let bits = bits as usize;
    let mut words = vec![0u32; (codes.len() * bits).div_ceil(32)];
    for (i, &q) in codes.iter().enumerate() {
        for b in 0..bits {
            if (q >> b) & 1 == 1 {
                let at = i * bits + b;
                words[at / 32] |= 1 << (at % 32);
            }
        }
    }
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A test matrix: its stored bytes and its exact values in f64.
pub(super) struct TestMatrix {
    pub(super) kind: Kind,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) data: Vec<u8>,
    pub(super) scales: Vec<u8>,
    pub(super) biases: Vec<u8>,
    /// Dequantized weights, [rows, cols].
    pub(super) w: Vec<f64>,
    /// |s·q| + |b| per weight (|w| for dense): the scale of each term's rounding error.
    pub(super) mag: Vec<f64>,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Dense(DenseDType),
    Affine {
        bits: u32,
        gs: usize,
        sdt: DenseDType,
    },
}

impl TestMatrix {
    pub(super) fn new(kind: Kind, rows: usize, cols: usize, rng: &mut Rng) -> TestMatrix {
        match kind {
            Kind::Dense(dtype) => {
                let data = encode(dtype, &rng.vec(rows * cols));
                let w: Vec<f64> = (0..rows * cols)
                    .map(|i| dtype.read(&data, i) as f64)
                    .collect();
                let mag = w.iter().map(|v| v.abs()).collect();
                TestMatrix {
                    kind,
                    rows,
                    cols,
                    data,
                    scales: vec![],
                    biases: vec![],
                    w,
                    mag,
                }
            }
            Kind::Affine { bits, gs, sdt } => {
                let ng = cols / gs;
                let codes: Vec<u32> = (0..rows * cols)
                    .map(|_| (rng.next() % (1 << bits)) as u32)
                    .collect();
                let scales = encode(
                    sdt,
                    &(0..rows * ng).map(|_| rng.sym() * 0.05).collect::<Vec<_>>(),
                );
                let biases = encode(
                    sdt,
                    &(0..rows * ng).map(|_| rng.sym() * 0.2).collect::<Vec<_>>(),
                );
                let (mut w, mut mag) = (vec![0f64; rows * cols], vec![0f64; rows * cols]);
                for i in 0..rows * cols {
                    let g = i / gs;
                    let (s, b) = (sdt.read(&scales, g) as f64, sdt.read(&biases, g) as f64);
                    w[i] = s * codes[i] as f64 + b;
                    mag[i] = (s * codes[i] as f64).abs() + b.abs();
                }
                TestMatrix {
                    kind,
                    rows,
                    cols,
                    data: pack_codes(&codes, bits),
                    scales,
                    biases,
                    w,
                    mag,
                }
            }
        }
    }
    pub(super) fn view(&self) -> MatrixRef<'_> {
        match self.kind {
            Kind::Dense(dtype) => MatrixRef::Dense {
                dtype,
                data: &self.data,
                rows: self.rows,
                cols: self.cols,
            },
            Kind::Affine { bits, gs, sdt } => MatrixRef::Affine {
                bits,
                group_size: gs,
                codes: &self.data,
                scales: &self.scales,
                biases: &self.biases,
                scale_dtype: sdt,
                rows: self.rows,
                cols: self.cols,
            },
        }
    }
}

/// Checks y against Σ x·w in f64, allowing 2e-5 of Σ |x|·mag (f32 rounding of products and partial sums).
fn assert_matches_reference(m: &TestMatrix, x: &[f32], n_rows: usize, y: &[f32], what: &str) {
    let (rows, cols) = (m.rows, m.cols);
    for r in 0..n_rows {
        for o in 0..rows {
            let (mut exact, mut scale) = (0f64, 0f64);
            for c in 0..cols {
                exact += x[r * cols + c] as f64 * m.w[o * cols + c];
                scale += (x[r * cols + c] as f64).abs() * m.mag[o * cols + c];
            }
            let got = y[r * rows + o] as f64;
            let tol = 2e-5 * scale + 1e-6;
            assert!(
                (got - exact).abs() <= tol,
                "{what}: y[{r},{o}] = {got}, reference {exact} (tolerance {tol}, {rows}x{cols})"
            );
        }
    }
}

fn run(isa: Isa, m: &TestMatrix, x: &[f32], n_rows: usize) -> Vec<f32> {
    let mut y = vec![f32::NAN; n_rows * m.rows];
    project_with(isa, x, n_rows, &m.view(), &mut y);
    y
}

fn check_against_reference(kinds: &[Kind], shapes: &[(usize, usize)], seed: u64) {
    let mut rng = Rng::new(seed);
    for &kind in kinds {
        for &(rows, cols) in shapes {
            let m = TestMatrix::new(kind, rows, cols, &mut rng);
            for n_rows in [1, 3, 9] {
                let x = rng.vec(n_rows * cols);
                for isa in available_isas() {
                    let y = run(isa, &m, &x, n_rows);
                    assert_matches_reference(
                        &m,
                        &x,
                        n_rows,
                        &y,
                        &format!("{kind:?} {isa:?} n_rows={n_rows}"),
                    );
                }
            }
        }
    }
}

fn affine_kinds(bits: u32) -> Vec<Kind> {
    let mut kinds = Vec::new();
    for gs in [32, 64, 128] {
        for sdt in DTYPES {
            kinds.push(Kind::Affine { bits, gs, sdt });
        }
    }
    kinds
}

fn check_affine_bits(bits: u32, seed: u64) {
    for kind in affine_kinds(bits) {
        let Kind::Affine { gs, .. } = kind else {
            unreachable!()
        };
        check_against_reference(&[kind], &[(7, gs), (13, 3 * gs)], seed);
    }
}

#[test]
fn packing_helper_puts_the_first_code_in_the_lowest_bits() {
    assert_eq!(
        pack_codes(&[1, 2, 3, 4, 5, 6, 7, 8], 4),
        0x8765_4321u32.to_le_bytes()
    );
    assert_eq!(
        pack_codes(&[0xAB, 0xCD, 0xEF, 0x01], 8),
        [0xAB, 0xCD, 0xEF, 0x01]
    );
    // 3-bit: code 10 straddles words 0 and 1 (bits 30..33).
    let mut codes = vec![0u32; 32];
    codes[10] = 0b111;
    let bytes = pack_codes(&codes, 3);
    assert_eq!(bytes.len(), 12);
    assert_eq!(
        u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        0b11 << 30
    );
    assert_eq!(bytes[4], 0b1);
}

#[test]
fn dense_projection_matches_f64_reference_for_every_dtype_and_odd_widths() {
    let shapes = [
        (5, 1),
        (9, 7),
        (6, 16),
        (11, 33),
        (7, 96),
        (10, 100),
        (5, 160),
        (4, 333),
    ];
    check_against_reference(&DTYPES.map(Kind::Dense), &shapes, 1);
}

#[test]
fn four_bit_projection_matches_f64_dequantized_reference() {
    check_affine_bits(4, 2);
}

#[test]
fn eight_bit_projection_matches_f64_dequantized_reference() {
    check_affine_bits(8, 3);
}

#[test]
fn two_bit_projection_matches_f64_dequantized_reference() {
    check_affine_bits(2, 4);
}

#[test]
fn three_five_and_six_bit_projections_match_f64_dequantized_reference() {
    for (i, bits) in [3, 5, 6].into_iter().enumerate() {
        check_affine_bits(bits, 5 + i as u64);
    }
}

/// Every format the kernels distinguish, in shapes with tails, several groups and more rows than one tile.
fn invariance_matrices(rng: &mut Rng) -> Vec<TestMatrix> {
    let mut ms: Vec<TestMatrix> = DTYPES
        .iter()
        .map(|&d| TestMatrix::new(Kind::Dense(d), 21, 100, rng))
        .collect();
    for bits in [2, 3, 4, 5, 6, 8] {
        for gs in [32, 64] {
            let sdt = if gs == 32 {
                DenseDType::BF16
            } else {
                DenseDType::F16
            };
            ms.push(TestMatrix::new(
                Kind::Affine { bits, gs, sdt },
                19,
                192,
                rng,
            ));
        }
    }
    ms
}

#[test]
fn rows_alone_equal_the_same_rows_inside_any_batch_bit_for_bit() {
    let mut rng = Rng::new(11);
    for m in invariance_matrices(&mut rng) {
        let cols = m.cols;
        let targets: Vec<Vec<f32>> = (0..3).map(|_| rng.vec(cols)).collect();
        for isa in available_isas() {
            let alone: Vec<Vec<f32>> = targets.iter().map(|t| run(isa, &m, t, 1)).collect();
            for n in 1..=9 {
                let (t, pos) = (rng.below(targets.len()), rng.below(n));
                let mut x = rng.vec(n * cols);
                x[pos * cols..(pos + 1) * cols].copy_from_slice(&targets[t]);
                let y = run(isa, &m, &x, n);
                let got: Vec<u32> = y[pos * m.rows..(pos + 1) * m.rows]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                let want: Vec<u32> = alone[t].iter().map(|v| v.to_bits()).collect();
                assert_eq!(
                    got, want,
                    "{:?} {isa:?}: row {pos} of {n} differs from the row alone",
                    m.kind
                );
            }
        }
    }
}

/// The same matrix without its first `k` rows (a view starting mid-matrix).
fn skip_rows(m: &TestMatrix, k: usize) -> MatrixRef<'_> {
    let rows = m.rows - k;
    match m.kind {
        Kind::Dense(dtype) => {
            let rb = m.cols * dtype.size();
            MatrixRef::Dense {
                dtype,
                data: &m.data[k * rb..],
                rows,
                cols: m.cols,
            }
        }
        Kind::Affine { bits, gs, sdt } => {
            let (rb, sb) = (m.cols * bits as usize / 8, m.cols / gs * sdt.size());
            MatrixRef::Affine {
                bits,
                group_size: gs,
                codes: &m.data[k * rb..],
                scales: &m.scales[k * sb..],
                biases: &m.biases[k * sb..],
                scale_dtype: sdt,
                rows,
                cols: m.cols,
            }
        }
    }
}

#[test]
fn weight_rows_give_the_same_bits_wherever_a_block_or_chunk_starts() {
    let mut rng = Rng::new(17);
    for m in invariance_matrices(&mut rng) {
        let x = rng.vec(5 * m.cols);
        for isa in available_isas() {
            let whole = run(isa, &m, &x, 5);
            for k in 1..4 {
                let view = skip_rows(&m, k);
                let rows = m.rows - k;
                let mut y = vec![0f32; 5 * rows];
                project_with(isa, &x, 5, &view, &mut y);
                for r in 0..5 {
                    let got: Vec<u32> = y[r * rows..(r + 1) * rows]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    let want: Vec<u32> = whole[r * m.rows + k..(r + 1) * m.rows]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    assert_eq!(
                        got, want,
                        "{:?} {isa:?}: rows shifted by {k} changed bits",
                        m.kind
                    );
                }
            }
        }
    }
}

#[test]
fn results_do_not_depend_on_thread_count_or_chunking() {
    let mut rng = Rng::new(12);
    // Large enough (rows·cols ≥ 2^18) that the public entry point splits output features across tasks.
    let kinds = [
        Kind::Dense(DenseDType::BF16),
        Kind::Affine {
            bits: 4,
            gs: 64,
            sdt: DenseDType::BF16,
        },
        Kind::Affine {
            bits: 6,
            gs: 32,
            sdt: DenseDType::F16,
        },
    ];
    for kind in kinds {
        let m = TestMatrix::new(kind, 700, 384, &mut rng);
        let x = rng.vec(6 * m.cols);
        let mut outs = Vec::new();
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool");
            pool.install(|| {
                let mut batch = vec![0f32; 6 * m.rows];
                super::project(&x, 6, &m.view(), &mut batch);
                let mut single = Vec::new();
                for r in 0..6 {
                    let mut y = vec![0f32; m.rows];
                    super::project(&x[r * m.cols..(r + 1) * m.cols], 1, &m.view(), &mut y);
                    single.extend(y);
                }
                assert_eq!(
                    batch.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    single.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{kind:?}, {threads} threads: batch differs from rows alone"
                );
                outs.push(batch);
            });
        }
        assert!(
            outs.windows(2).all(|p| p[0] == p[1]),
            "{kind:?}: results differ between thread counts"
        );
        assert_matches_reference(
            &m,
            &x[..m.cols],
            1,
            &outs[0][..m.rows],
            &format!("{kind:?} public"),
        );
    }
}

#[test]
fn matrix_row_matches_the_dequantized_reference() {
    let mut rng = Rng::new(13);
    let mut kinds: Vec<Kind> = DTYPES.map(Kind::Dense).to_vec();
    for bits in [2, 3, 4, 5, 6, 8] {
        kinds.extend(affine_kinds(bits));
    }
    for kind in kinds {
        let cols = match kind {
            Kind::Dense(_) => 37,
            Kind::Affine { gs, .. } => 2 * gs,
        };
        let m = TestMatrix::new(kind, 5, cols, &mut rng);
        for isa in available_isas() {
            for row in [0, 2, 4] {
                let mut out = vec![f32::NAN; cols];
                matrix_row_with(isa, &m.view(), row, &mut out);
                for (c, &v) in out.iter().enumerate() {
                    let want = m.w[row * cols + c];
                    let tol = 1e-6 * m.mag[row * cols + c];
                    assert!(
                        (v as f64 - want).abs() <= tol,
                        "{kind:?} {isa:?} W[{row},{c}] = {v}, want {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn dot_and_axpy_match_f64_and_elementwise_fma_at_every_length() {
    let mut rng = Rng::new(14);
    for n in (0..70).chain([255, 1000]) {
        let (a, b) = (rng.vec(n), rng.vec(n));
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        let scale: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (*x as f64 * *y as f64).abs())
            .sum();
        let alpha = rng.sym();
        for isa in available_isas() {
            let d = dot_with(isa, &a, &b);
            assert!(
                (d as f64 - exact).abs() <= 1e-6 * scale + 1e-7,
                "{isa:?} dot n={n}: {d} vs {exact}"
            );
            let mut y = b.clone();
            axpy_with(isa, alpha, &a, &mut y);
            for i in 0..n {
                let want = match isa {
                    Isa::Scalar => b[i] + alpha * a[i],
                    _ => alpha.mul_add(a[i], b[i]),
                };
                assert_eq!(y[i].to_bits(), want.to_bits(), "{isa:?} axpy n={n} i={i}");
            }
        }
    }
}

#[test]
fn empty_batches_and_empty_matrices_are_fine() {
    let mut rng = Rng::new(15);
    let m = TestMatrix::new(Kind::Dense(DenseDType::BF16), 4, 32, &mut rng);
    for isa in available_isas() {
        assert!(run(isa, &m, &[], 0).is_empty());
        let z = TestMatrix::new(Kind::Dense(DenseDType::F32), 3, 0, &mut rng);
        assert_eq!(run(isa, &z, &[], 2), vec![0.0; 6]);
        let kind = Kind::Affine {
            bits: 4,
            gs: 32,
            sdt: DenseDType::BF16,
        };
        let z = TestMatrix::new(kind, 3, 0, &mut rng);
        assert_eq!(run(isa, &z, &[], 2), vec![0.0; 6]);
    }
}

#[test]
#[should_panic(expected = "code bytes")]
fn a_short_code_buffer_is_refused_with_its_shape() {
    let mut rng = Rng::new(16);
    let mut m = TestMatrix::new(
        Kind::Affine {
            bits: 4,
            gs: 32,
            sdt: DenseDType::BF16,
        },
        4,
        64,
        &mut rng,
    );
    m.data.truncate(m.data.len() - 4);
    run(super::isa(), &m, &[0.0; 64], 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_shapes_match_the_reference_and_stay_row_invariant(
        seed in any::<u64>(), rows in 1usize..24, cols_units in 1usize..6, n in 1usize..12, which in 0usize..9,
    ) {
        let mut rng = Rng::new(seed);
        let kind = match which {
            0..=2 => Kind::Dense(DTYPES[which]),
            _ => Kind::Affine { bits: [2, 3, 4, 5, 6, 8][which - 3], gs: 32, sdt: DenseDType::BF16 },
        };
        let cols = match kind { Kind::Dense(_) => cols_units * 19, Kind::Affine { .. } => cols_units * 32 };
        let m = TestMatrix::new(kind, rows, cols, &mut rng);
        let x = rng.vec(n * cols);
        for isa in available_isas() {
            let y = run(isa, &m, &x, n);
            assert_matches_reference(&m, &x, n, &y, &format!("{kind:?} {isa:?}"));
            let r = rng.below(n);
            let alone = run(isa, &m, &x[r * cols..(r + 1) * cols], 1);
            prop_assert_eq!(
                alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                y[r * rows..(r + 1) * rows].iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}
