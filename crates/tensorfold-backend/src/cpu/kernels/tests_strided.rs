//! The page-at-a-time attention helpers and the batched delta rule held to one dot / one axpy per key or state
//! row, bit for bit, on every SIMD level.

use super::tests::Rng;
use super::{
    available_isas, axpy_with, axpys_strided_with, dot_with, dots_strided_with, DeltaStep,
};

#[test]
fn page_at_a_time_scores_and_value_sums_equal_one_call_per_key_bit_for_bit() {
    let mut rng = Rng::new(77);
    for isa in available_isas() {
        for hd in [8usize, 24, 40, 64, 72, 96, 128] {
            for n in [1usize, 3, 16, 19, 35] {
                let stride = 2 * hd + 8;
                let keys: Vec<f32> = (0..n * stride).map(|_| rng.sym()).collect();
                let q: Vec<f32> = (0..hd).map(|_| rng.sym()).collect();
                let mut got = vec![0f32; n];
                dots_strided_with(isa, &q, &keys, stride, &mut got);
                for (i, g) in got.iter().enumerate() {
                    let want = dot_with(isa, &q, &keys[i * stride..i * stride + hd]);
                    assert_eq!(
                        g.to_bits(),
                        want.to_bits(),
                        "{isa:?} hd {hd} key {i} of {n}"
                    );
                }
                let alphas: Vec<f32> = (0..n).map(|_| rng.sym()).collect();
                let start: Vec<f32> = (0..hd).map(|_| rng.sym()).collect();
                let mut y = start.clone();
                axpys_strided_with(isa, &alphas, &keys, stride, &mut y);
                let mut want = start;
                for (i, &a) in alphas.iter().enumerate() {
                    axpy_with(isa, a, &keys[i * stride..i * stride + hd], &mut want);
                }
                let same = y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{isa:?} hd {hd} rows {n}: value sums differ");
            }
        }
    }
}

/// The per-row composition `delta_rule_f32` promises: decay, dot with k, axpy, dot with q, one state row at a time.
fn delta_rule_by_rows(
    isa: super::Isa,
    state: &mut [f32],
    dk: usize,
    s: &DeltaStep<'_>,
    o: &mut [f32],
) {
    for (j, sj) in state.chunks_mut(dk).enumerate() {
        sj.iter_mut().for_each(|e| *e *= s.decay);
        let kv = dot_with(isa, sj, s.k);
        axpy_with(isa, s.beta * (s.v[j] - kv), s.k, sj);
        o[j] = dot_with(isa, sj, s.q);
    }
}

#[test]
fn delta_rule_steps_equal_one_dot_and_axpy_per_state_row_bit_for_bit() {
    let mut rng = Rng::new(91);
    for isa in available_isas() {
        // 64x64 and 128x128 take the sixteen-row AVX-512 kernel; the others its per-row fallback.
        for (dv, dk) in [(64usize, 64usize), (128, 128), (32, 96), (16, 40), (24, 64)] {
            let mut state: Vec<f32> = (0..dv * dk).map(|_| rng.sym()).collect();
            let mut want_state = state.clone();
            for step in 0..3 {
                let k: Vec<f32> = (0..dk).map(|_| rng.sym() * 0.2).collect();
                let q: Vec<f32> = (0..dk).map(|_| rng.sym() * 0.2).collect();
                let v: Vec<f32> = (0..dv).map(|_| rng.sym()).collect();
                let (decay, beta) = (0.5 + 0.5 * rng.sym().abs(), rng.sym().abs());
                let s = DeltaStep {
                    decay,
                    beta,
                    k: &k,
                    q: &q,
                    v: &v,
                };
                let (mut got, mut want) = (vec![0f32; dv], vec![0f32; dv]);
                super::delta_rule_with(isa, &mut state, dk, &s, Some(&mut got));
                delta_rule_by_rows(isa, &mut want_state, dk, &s, &mut want);
                let same =
                    |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same(&got, &want),
                    "{isa:?} {dv}x{dk} step {step}: outputs differ"
                );
                assert!(
                    same(&state, &want_state),
                    "{isa:?} {dv}x{dk} step {step}: states differ"
                );
            }
            // Without an output (keep's replay) the state moves the same way.
            let k: Vec<f32> = (0..dk).map(|_| rng.sym()).collect();
            let v: Vec<f32> = (0..dv).map(|_| rng.sym()).collect();
            let mut scratch = vec![0f32; dv];
            let s = DeltaStep {
                decay: 0.9,
                beta: 0.3,
                k: &k,
                q: &k,
                v: &v,
            };
            super::delta_rule_with(isa, &mut state, dk, &s, None);
            delta_rule_by_rows(isa, &mut want_state, dk, &s, &mut scratch);
            assert!(state
                .iter()
                .zip(&want_state)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
        }
    }
}
