//! The page-at-a-time attention helpers held to one dot / one axpy per key, bit for bit, on every SIMD level.

use super::tests::Rng;
use super::{available_isas, axpy_with, axpys_strided_with, dot_with, dots_strided_with};

#[test]
fn page_at_a_time_scores_and_value_sums_equal_one_call_per_key_bit_for_bit() {
    let mut rng = Rng::new(77);
    for isa in available_isas() {
        for hd in [8usize, 24, 40, 64, 72, 128] {
            for n in [1usize, 3, 16] {
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
