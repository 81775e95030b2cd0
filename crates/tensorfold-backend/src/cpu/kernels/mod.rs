//! CPU projection kernels over weights in their stored format (dense f32/f16/bf16, MLX affine 2–8 bit): each
//! output element has one fixed reduction order, so a row's bits never depend on other rows, their count or threads.
//!
//! One SIMD level is chosen per process (AVX-512F+BW, AVX2+FMA+F16C, or scalar) and every call uses it, so results
//! are deterministic on a machine; levels agree with each other only to float tolerance.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_rows;
#[cfg(target_arch = "x86_64")]
mod avx512q;
mod project;
mod scalar;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_strided;
#[cfg(test)]
mod throughput;

use std::sync::OnceLock;
use tensorfold_core::{DenseDType, MatrixRef};

/// y[r*w.rows() + o] = Σ_c x[r*w.cols() + c] · W[o, c]   for r in 0..n_rows, o in 0..w.rows()
/// x: [n_rows, cols] f32 row-major; y: [n_rows, rows] f32 row-major (overwritten).
pub fn project(x: &[f32], n_rows: usize, w: &MatrixRef<'_>, y: &mut [f32]) {
    project::project_with(isa(), x, n_rows, w, y);
}

/// Dequantizes/converts row `row` of W into out (len = cols). Used for embedding lookups.
pub fn matrix_row(w: &MatrixRef<'_>, row: usize, out: &mut [f32]) {
    project::matrix_row_with(isa(), w, row, out);
}

/// Σ_i a[i]*b[i] over f32 slices with the same fixed-order SIMD accumulation used everywhere (for attention scores etc.).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    dot_with(isa(), a, b)
}

/// out[i] = dot_f32(q, keys[i·stride ..][..q.len()]) for i < out.len(), bit for bit, in one call (attention
/// scores over the keys of a KV page).
pub fn dots_strided_f32(q: &[f32], keys: &[f32], stride: usize, out: &mut [f32]) {
    dots_strided_with(isa(), q, keys, stride, out);
}

fn dots_strided_with(isa: Isa, q: &[f32], keys: &[f32], stride: usize, out: &mut [f32]) {
    debug_assert!(supported(isa));
    let n = out.len();
    if n == 0 {
        return;
    }
    assert!(
        stride >= q.len() && keys.len() >= (n - 1) * stride + q.len(),
        "dots_strided: {n} keys of {} at stride {stride} need more than {} floats",
        q.len(),
        keys.len()
    );
    match isa {
        // SAFETY: `Isa::Avx512` exists only where its features were detected; the assert above bounds every read.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512_rows::dots_strided(q, keys.as_ptr(), stride, n, out) },
        // SAFETY: as above, for avx2, fma and f16c.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::dots_strided(q, keys.as_ptr(), stride, n, out) },
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = scalar::dot(q, &keys[i * stride..i * stride + q.len()]);
            }
        }
    }
}

/// y += alphas[i] · values[i·stride ..][..y.len()] for each i in order, bit for bit as one `axpy_f32` per row
/// (attention's weighted values over a KV page).
pub fn axpys_strided_f32(alphas: &[f32], values: &[f32], stride: usize, y: &mut [f32]) {
    axpys_strided_with(isa(), alphas, values, stride, y);
}

fn axpys_strided_with(isa: Isa, alphas: &[f32], values: &[f32], stride: usize, y: &mut [f32]) {
    debug_assert!(supported(isa));
    let n = alphas.len();
    if n == 0 {
        return;
    }
    assert!(
        stride >= y.len() && values.len() >= (n - 1) * stride + y.len(),
        "axpys_strided: {n} rows of {} at stride {stride} need more than {} floats",
        y.len(),
        values.len()
    );
    match isa {
        // SAFETY: `Isa::Avx512` exists only where its features were detected; the assert above bounds every read.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512_rows::axpys_strided(alphas, values.as_ptr(), stride, y) },
        // SAFETY: as above, for avx2 and fma.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::axpys_strided(alphas, values.as_ptr(), stride, y) },
        _ => {
            let m = y.len();
            for (i, &a) in alphas.iter().enumerate() {
                scalar::axpy(a, &values[i * stride..i * stride + m], y);
            }
        }
    }
}

/// y[i] += alpha * x[i]
pub fn axpy_f32(alpha: f32, x: &[f32], y: &mut [f32]) {
    axpy_with(isa(), alpha, x, y);
}

/// One delta-rule step's inputs for one value head: its gates and its normalised k and q (key_dim each), v
/// (value_dim).
#[derive(Clone, Copy, Debug)]
pub struct DeltaStep<'a> {
    pub decay: f32,
    pub beta: f32,
    pub k: &'a [f32],
    pub q: &'a [f32],
    pub v: &'a [f32],
}

/// One delta-rule step of a DeltaNet head on `state` ([v.len(), dk], row j = value j's key vector): for each row,
/// s_j *= decay; kv = dot_f32(s_j, k); axpy_f32(beta·(v_j − kv), k, s_j); o_j = dot_f32(s_j, q) if `o` is given.
/// Bit for bit that composition; AVX-512 runs sixteen rows at a time when the shapes allow.
pub fn delta_rule_f32(state: &mut [f32], dk: usize, step: &DeltaStep<'_>, o: Option<&mut [f32]>) {
    delta_rule_with(isa(), state, dk, step, o);
}

fn delta_rule_with(
    isa: Isa,
    state: &mut [f32],
    dk: usize,
    step: &DeltaStep<'_>,
    mut o: Option<&mut [f32]>,
) {
    debug_assert!(supported(isa));
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && dk.is_multiple_of(32) && step.v.len().is_multiple_of(16) {
        // SAFETY: `Isa::Avx512` exists only where avx512f was detected; the kernel asserts its shapes.
        unsafe { avx512_rows::delta_rule(state, dk, step, o) };
        return;
    }
    for (j, sj) in state.chunks_mut(dk).enumerate() {
        sj.iter_mut().for_each(|e| *e *= step.decay);
        let kv = dot_with(isa, sj, step.k);
        axpy_with(isa, step.beta * (step.v[j] - kv), step.k, sj);
        if let Some(o) = o.as_deref_mut() {
            o[j] = dot_with(isa, sj, step.q);
        }
    }
}

/// The SIMD level every kernel of this process uses: "avx512", "avx2" or "scalar".
pub fn simd_level() -> &'static str {
    match isa() {
        Isa::Avx512 => "avx512",
        Isa::Avx2 => "avx2",
        Isa::Scalar => "scalar",
    }
}

/// One kernel call's work: weight rows [0, n_o) of a block against all nr x rows.
struct Block<'a> {
    /// Dense: the block's rows; affine: codes from the block's first row to the end of the matrix.
    w: &'a [u8],
    /// Affine scales and biases as f32, [n_o, groups].
    scales: &'a [f32],
    biases: &'a [f32],
    n_o: usize,
    /// The x rows as the kernel reads them, [nr, cols].
    xs: &'a [f32],
    /// Affine: per-group sums of the x rows, [nr, groups].
    xsum: &'a [f32],
    nr: usize,
    cols: usize,
}

impl Block<'_> {
    /// Panics unless every slice holds what a kernel reads (the SIMD loads rely on it).
    fn check(&self, w_bytes: usize, groups: usize, out_len: usize, stride: usize) {
        assert!(
            self.w.len() >= w_bytes,
            "block: {} weight bytes, need {w_bytes}",
            self.w.len()
        );
        assert!(self.xs.len() >= self.nr * self.cols, "block: x too short");
        assert!(self.scales.len() >= self.n_o * groups && self.biases.len() >= self.n_o * groups);
        assert!(
            self.xsum.len() >= self.nr * groups,
            "block: x group sums too short"
        );
        assert!(self.nr == 0 || self.n_o == 0 || out_len >= (self.nr - 1) * stride + self.n_o);
    }
}

/// A SIMD level. Only `detect` (and the tests, through `available_isas`) hand out `Avx2` / `Avx512`, and
/// only when the CPU has the features their kernels enable; the dispatchers rely on that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    Scalar,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
}

fn supported(isa: Isa) -> bool {
    match isa {
        Isa::Scalar => true,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            supported(Isa::Avx2)
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => false,
    }
}

/// The level this process uses, chosen once: the best the CPU supports, or a lower one named by the
/// environment variable `TENSORFOLD_SIMD` (`avx512`, `avx2` or `scalar`; for comparisons and debugging).
fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let cap = match std::env::var("TENSORFOLD_SIMD").as_deref() {
            Ok("scalar") => Isa::Scalar,
            Ok("avx2") => Isa::Avx2,
            _ => Isa::Avx512,
        };
        [Isa::Avx512, Isa::Avx2, Isa::Scalar]
            .into_iter()
            .filter(|&i| i as u8 <= cap as u8)
            .find(|&i| supported(i))
            .unwrap_or(Isa::Scalar)
    })
}

/// Every level this CPU can run (for tests that hold each one to the reference).
#[cfg(test)]
fn available_isas() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|&i| supported(i))
        .collect()
}

fn dot_with(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    debug_assert!(supported(isa));
    match isa {
        // SAFETY: `Isa::Avx512` exists only where avx512f, avx512bw, avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::dot(a, b) },
        // SAFETY: `Isa::Avx2` exists only where avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::dot(a, b) },
        _ => scalar::dot(a, b),
    }
}

fn axpy_with(isa: Isa, alpha: f32, x: &[f32], y: &mut [f32]) {
    debug_assert!(supported(isa));
    match isa {
        // SAFETY: `Isa::Avx512` exists only where avx512f, avx512bw, avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::axpy(alpha, x, y) },
        // SAFETY: `Isa::Avx2` exists only where avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::axpy(alpha, x, y) },
        _ => scalar::axpy(alpha, x, y),
    }
}

/// Exact conversion of `out.len()` stored elements to f32 (every level gives the same bits).
fn convert_with(isa: Isa, dtype: DenseDType, bytes: &[u8], out: &mut [f32]) {
    debug_assert!(supported(isa));
    match isa {
        // SAFETY: `Isa::Avx512` exists only where avx512f, avx512bw, avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512::convert(dtype, bytes, out) },
        // SAFETY: `Isa::Avx2` exists only where avx2, fma and f16c were detected.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2::convert(dtype, bytes, out) },
        _ => scalar::convert(dtype, bytes, out),
    }
}
