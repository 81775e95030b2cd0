//! The fixed IEEE arithmetic of keyed sampling: noise, logs, exps and the softmax total, each a sequence of plain
//! f64 operations (no libm, no fused multiply-add) that a device repeats operation for operation (tensorfold-cuda
//! kernels/sample.cu), so a draw never depends on which machine ran it.

pub(super) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// ln 2 split so that k · LN2_HI is exact for every exponent k (its low 32 bits are zero), and the rest.
const LN2_HI: f64 = 0.6931471803691238;
const LN2_LO: f64 = 1.9082149292705877e-10;
/// 1/3, 1/5, …, 1/21: the series 2·atanh(s) = 2s·(1 + s²/3 + s⁴/5 + …), enough terms for |s| ≤ 0.172.
const ATANH_SERIES: [f64; 10] = [
    0.3333333333333333,
    0.2,
    0.14285714285714285,
    0.1111111111111111,
    0.09090909090909091,
    0.07692307692307693,
    0.06666666666666667,
    0.058823529411764705,
    0.05263157894736842,
    0.047619047619047616,
];
/// 1/13!, 1/12!, …, 1/0!: Taylor's series of e^r, enough terms for |r| ≤ ln2/2 + a little.
const EXP_SERIES: [f64; 14] = [
    1.6059043836821613e-10,
    2.08767569878681e-09,
    2.505210838544172e-08,
    2.755731922398589e-07,
    2.7557319223985893e-06,
    2.48015873015873e-05,
    0.0001984126984126984,
    0.001388888888888889,
    0.008333333333333333,
    0.041666666666666664,
    0.16666666666666666,
    0.5,
    1.0,
    1.0,
];

/// Natural log of a positive normal f64. x = m·2^e with m in [√½, √2); ln m = 2·atanh(f / (2 + f)) with
/// f = m − 1 (exact). Within a few ulp of the true log.
pub fn keyed_ln(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let mut p = ATANH_SERIES[ATANH_SERIES.len() - 1];
    for &c in ATANH_SERIES[..ATANH_SERIES.len() - 1].iter().rev() {
        p = p * z + c;
    }
    let r = s * (z * p);
    let k = e as f64;
    k * LN2_HI + (k * LN2_LO + 2.0 * (s + r))
}

/// 2^k for an exponent k in [−1022, 1023], exactly.
fn pow2(k: i64) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// e^x: x = k·ln2 + r with k the nearest integer to x/ln2, e^r by its Taylor series, then scaled by 2^k (in two
/// steps where 2^k is not a normal f64). NaN gives NaN, e^−∞ = 0. Within a few ulp of the true exp.
pub fn keyed_exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < -745.2 {
        return 0.0;
    }
    if x > 709.7 {
        return f64::INFINITY;
    }
    // (sample.cu writes LOG2_E as the literal 1.4426950408889634, the same f64.)
    let k = (x * std::f64::consts::LOG2_E + 0.5).floor();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let mut p = EXP_SERIES[0];
    for &c in &EXP_SERIES[1..] {
        p = p * r + c;
    }
    let k = k as i64;
    if k < -1022 {
        p * pow2(k + 600) * pow2(-600)
    } else if k > 1023 {
        p * pow2(k - 600) * pow2(600)
    } else {
        p * pow2(k)
    }
}

/// Gumbel(0,1) noise keyed by (seed, position, token): the same key always gives the same noise.
pub fn keyed_gumbel(seed: u64, position: u64, token: u32) -> f64 {
    let h = splitmix64(splitmix64(splitmix64(seed) ^ position) ^ token as u64);
    // 53 random bits → u in (0, 1), never 0 or 1.
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -keyed_ln(-keyed_ln(u))
}

/// Lanes of `keyed_total`'s sum (sample.cu TOP_THREADS: one thread a lane).
pub const TOTAL_LANES: usize = 1024;

/// Σ keyed_exp(l·inv_t − max) over the row's logits that are not NaN, the normalizer of top-p and min-p, in an
/// order a device runs in parallel: lane r adds the ids ≡ r (mod 1024) in increasing order, then lane r adds lane
/// r + h for h = 512, 256, …, 1, and lane 0 is the total.
pub fn keyed_total(logits: &[f32], inv_t: f64, max: f64) -> f64 {
    let mut lanes = [0.0f64; TOTAL_LANES];
    for chunk in logits.chunks(TOTAL_LANES) {
        for (lane, &l) in lanes.iter_mut().zip(chunk) {
            if !l.is_nan() {
                *lane += keyed_exp(l as f64 * inv_t - max);
            }
        }
    }
    let mut h = TOTAL_LANES / 2;
    while h > 0 {
        for r in 0..h {
            lanes[r] += lanes[r + h];
        }
        h /= 2;
    }
    lanes[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(got: f64, want: f64) -> f64 {
        let ulp = f64::from_bits(want.abs().to_bits() + 1) - want.abs();
        (got - want).abs() / ulp.max(f64::MIN_POSITIVE)
    }

    #[test]
    fn keyed_ln_is_within_a_few_ulp_of_the_true_log_over_the_draws_range() {
        // The draw takes logs of u in (2^-54, 1) and of −ln u in (2^-54, 38).
        let mut worst = 0.0f64;
        let mut x = 2f64.powi(-54);
        while x < 64.0 {
            for k in 0..97 {
                let v = x * (1.0 + k as f64 / 97.0);
                worst = worst.max(ulps(keyed_ln(v), v.ln()));
            }
            x *= 1.37;
        }
        for v in [
            1.0 - 2f64.powi(-53),
            1.0 + 2f64.powi(-52),
            0.5,
            2.0,
            std::f64::consts::SQRT_2,
        ] {
            worst = worst.max(ulps(keyed_ln(v), v.ln()));
        }
        assert_eq!(keyed_ln(1.0), 0.0);
        assert!(worst <= 4.0, "keyed_ln is {worst} ulp off");
    }

    #[test]
    fn keyed_exp_is_within_a_few_ulp_of_the_true_exp_down_to_the_subnormals() {
        let mut worst = 0.0f64;
        let mut x = -700.0f64;
        while x < 700.0 {
            worst = worst.max(ulps(keyed_exp(x), x.exp()));
            x += 0.0137;
        }
        for x in [0.0, -1e-300, 1e-300, -0.5, 0.3465, -0.3466, -708.4, 709.5] {
            worst = worst.max(ulps(keyed_exp(x), x.exp()));
        }
        assert!(worst <= 4.0, "keyed_exp is {worst} ulp off");
        assert_eq!(keyed_exp(0.0), 1.0);
        assert_eq!(keyed_exp(f64::NEG_INFINITY), 0.0);
        assert!(keyed_exp(f64::NAN).is_nan());
        assert_eq!(keyed_exp(800.0), f64::INFINITY);
        // Subnormal results stay close in absolute terms (their ulp is the least subnormal).
        for x in [-710.0f64, -730.0, -744.0] {
            assert!(
                (keyed_exp(x) - x.exp()).abs() <= 4.0 * f64::from_bits(1),
                "{x}"
            );
        }
    }

    #[test]
    fn keyed_total_skips_nan_and_sums_every_lane() {
        let mut row: Vec<f32> = (0..3000)
            .map(|i| ((i * 7) % 13) as f32 * 0.5 - 3.0)
            .collect();
        row[5] = f32::NAN;
        row[2047] = f32::NEG_INFINITY;
        let max = 3.0f64 * 0.9;
        let want: f64 = row
            .iter()
            .filter(|l| !l.is_nan())
            .map(|&l| (l as f64 * 0.9 - max).exp())
            .sum();
        let got = keyed_total(&row, 0.9, max);
        assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
        assert_eq!(keyed_total(&[f32::NAN; 4], 1.0, 0.0), 0.0);
    }
}
