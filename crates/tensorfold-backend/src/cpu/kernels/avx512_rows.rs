//! AVX-512 kernels over many independent reductions (attention's keys and values, the delta rule's state rows),
//! bit for bit one `dot` / `axpy` (avx512.rs) per key or row: sixteen horizontal sums run as one, and independent
//! accumulators break the latency chains; no element's arithmetic changes.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

/// Lane j of the result = `hsum(v[j])` (avx512.rs) bit for bit. Each level adds the same lane pairs `hsum` adds
/// (v[i]+v[i+8], then +4, then +2, then +1) for sixteen vectors at once; IEEE addition commutes exactly, so the
/// operand order the shuffles produce does not matter, only the pairing.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn hsum16(v: &[__m512; 16]) -> __m512 {
    // Level 1: one vector per pair of rows, each 256-bit half = lo256 + hi256 of one row.
    let mut l1 = [_mm512_setzero_ps(); 8];
    for p in 0..8 {
        let (a, b) = (v[2 * p], v[2 * p + 1]);
        let x = _mm512_shuffle_f32x4::<0b01_00_01_00>(a, b);
        let y = _mm512_shuffle_f32x4::<0b11_10_11_10>(a, b);
        l1[p] = _mm512_add_ps(x, y);
    }
    // Level 2: 128-bit quarter m of l2[q] = lo128 + hi128 of row 4q + m.
    let mut l2 = [_mm512_setzero_ps(); 4];
    for q in 0..4 {
        let (a, b) = (l1[2 * q], l1[2 * q + 1]);
        let x = _mm512_shuffle_f32x4::<0b10_00_10_00>(a, b);
        let y = _mm512_shuffle_f32x4::<0b11_01_11_01>(a, b);
        l2[q] = _mm512_add_ps(x, y);
    }
    // Level 3: quarter m of l3[h] = [s0+s2, s1+s3] of row 8h + m, then of row 8h + 4 + m.
    let mut l3 = [_mm512_setzero_ps(); 2];
    for h in 0..2 {
        let (a, b) = (l2[2 * h], l2[2 * h + 1]);
        let x = _mm512_shuffle_ps::<0b01_00_01_00>(a, b);
        let y = _mm512_shuffle_ps::<0b11_10_11_10>(a, b);
        l3[h] = _mm512_add_ps(x, y);
    }
    // Level 4: lane 4m + k = the sum of row 4k + m.
    let x = _mm512_shuffle_ps::<0b10_00_10_00>(l3[0], l3[1]);
    let y = _mm512_shuffle_ps::<0b11_01_11_01>(l3[0], l3[1]);
    let f = _mm512_add_ps(x, y);
    let idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(idx, f)
}

/// For each state row j (`dk` floats; dk a multiple of 32, rows a multiple of 16):
/// s_j *= decay; kv = dot(s_j, k); s_j = fma(beta·(v_j − kv), k, s_j); o_j = dot(s_j, q) when `o` is given.
/// Each dot keeps `dot`'s two accumulators over 32-column steps and its horizontal sum.
/// Caller: avx512f is available; state.len() = v.len()·dk, k and q hold dk floats, o (if any) v.len().
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn delta_rule(
    state: &mut [f32],
    dk: usize,
    step: &super::DeltaStep<'_>,
    mut o: Option<&mut [f32]>,
) {
    let super::DeltaStep {
        decay,
        beta,
        k,
        q,
        v,
    } = *step;
    let dv = v.len();
    assert!(dk.is_multiple_of(32) && dv.is_multiple_of(16) && state.len() == dv * dk);
    assert!(k.len() == dk && q.len() == dk && o.as_ref().is_none_or(|o| o.len() == dv));
    let (kp, qp) = (k.as_ptr(), q.as_ptr());
    let d = _mm512_set1_ps(decay);
    for j0 in (0..dv).step_by(16) {
        let mut sums = [_mm512_setzero_ps(); 16];
        for r in 0..16 {
            let s = state.as_mut_ptr().add((j0 + r) * dk);
            let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
            for c in (0..dk).step_by(32) {
                let s0 = _mm512_mul_ps(_mm512_loadu_ps(s.add(c)), d);
                let s1 = _mm512_mul_ps(_mm512_loadu_ps(s.add(c + 16)), d);
                _mm512_storeu_ps(s.add(c), s0);
                _mm512_storeu_ps(s.add(c + 16), s1);
                a0 = _mm512_fmadd_ps(s0, _mm512_loadu_ps(kp.add(c)), a0);
                a1 = _mm512_fmadd_ps(s1, _mm512_loadu_ps(kp.add(c + 16)), a1);
            }
            sums[r] = _mm512_add_ps(a0, a1);
        }
        let kv = hsum16(&sums);
        let vj = _mm512_loadu_ps(v.as_ptr().add(j0));
        let mut alphas = [0f32; 16];
        _mm512_storeu_ps(
            alphas.as_mut_ptr(),
            _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_sub_ps(vj, kv)),
        );
        for r in 0..16 {
            let s = state.as_mut_ptr().add((j0 + r) * dk);
            let a = _mm512_set1_ps(alphas[r]);
            for c in (0..dk).step_by(16) {
                let sc = _mm512_fmadd_ps(a, _mm512_loadu_ps(kp.add(c)), _mm512_loadu_ps(s.add(c)));
                _mm512_storeu_ps(s.add(c), sc);
            }
            sums[r] = dot_lanes(s, qp, dk);
        }
        if let Some(o) = o.as_deref_mut() {
            _mm512_storeu_ps(o.as_mut_ptr().add(j0), hsum16(&sums));
        }
    }
}

/// The partial sums `dot` keeps for a · b (dk a multiple of 32): a0 over the first 16 columns of each 32-column
/// step, a1 over the second, returned as a0 + a1 (what `hsum` then reduces).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn dot_lanes(a: *const f32, b: *const f32, n: usize) -> __m512 {
    let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for c in (0..n).step_by(32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(c)), _mm512_loadu_ps(b.add(c)), a0);
        a1 = _mm512_fmadd_ps(
            _mm512_loadu_ps(a.add(c + 16)),
            _mm512_loadu_ps(b.add(c + 16)),
            a1,
        );
    }
    _mm512_add_ps(a0, a1)
}

/// out[i] = dot(q, key i) for `n` keys `stride` floats apart (attention scores over a KV page), sixteen keys per
/// batched horizontal sum when q.len() is a multiple of 32. Caller: the features enabled here are available;
/// `keys` holds n − 1 strides plus q.len() floats and out at least n.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub(super) unsafe fn dots_strided(
    q: &[f32],
    keys: *const f32,
    stride: usize,
    n: usize,
    out: &mut [f32],
) {
    assert!(
        out.len() >= n,
        "dots_strided: {} outputs for {n} keys",
        out.len()
    );
    let hd = q.len();
    let mut i = 0;
    if hd.is_multiple_of(32) {
        while i + 16 <= n {
            let mut sums = [_mm512_setzero_ps(); 16];
            for (r, s) in sums.iter_mut().enumerate() {
                *s = dot_lanes(keys.add((i + r) * stride), q.as_ptr(), hd);
            }
            _mm512_storeu_ps(out.as_mut_ptr().add(i), hsum16(&sums));
            i += 16;
        }
    }
    for j in i..n {
        out[j] = super::avx512::dot(q, std::slice::from_raw_parts(keys.add(j * stride), hd));
    }
}

/// For each value row i in order, y = fma(alphas[i], row i, y) (rows `stride` floats apart): the arithmetic of
/// one `axpy` per row. Four 16-column accumulators run side by side so consecutive rows' fmas do not wait on each
/// other. Caller: the features enabled here are available; `values` holds alphas.len() − 1 strides plus y.len()
/// floats.
#[target_feature(enable = "avx512f,avx512bw,fma")]
pub(super) unsafe fn axpys_strided(
    alphas: &[f32],
    values: *const f32,
    stride: usize,
    y: &mut [f32],
) {
    let n = y.len();
    let mut c = 0;
    while c + 64 <= n {
        let p = y.as_mut_ptr().add(c);
        let mut acc = [
            _mm512_loadu_ps(p),
            _mm512_loadu_ps(p.add(16)),
            _mm512_loadu_ps(p.add(32)),
            _mm512_loadu_ps(p.add(48)),
        ];
        for (i, &a) in alphas.iter().enumerate() {
            let (a, v) = (_mm512_set1_ps(a), values.add(i * stride + c));
            for (u, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_fmadd_ps(a, _mm512_loadu_ps(v.add(16 * u)), *acc);
            }
        }
        for (u, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(p.add(16 * u), *acc);
        }
        c += 64;
    }
    while c + 16 <= n {
        let p = y.as_mut_ptr().add(c);
        let mut acc = _mm512_loadu_ps(p);
        for (i, &a) in alphas.iter().enumerate() {
            acc = _mm512_fmadd_ps(
                _mm512_set1_ps(a),
                _mm512_loadu_ps(values.add(i * stride + c)),
                acc,
            );
        }
        _mm512_storeu_ps(p, acc);
        c += 16;
    }
    for k in c..n {
        for (i, &a) in alphas.iter().enumerate() {
            y[k] = a.mul_add(*values.add(i * stride + k), y[k]);
        }
    }
}
