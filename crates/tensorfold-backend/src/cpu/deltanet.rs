//! Gated DeltaNet on the CPU: causal depthwise conv with its tail, SiLU, q/k L2 norm, beta and decay gates,
//! the fp32 delta-rule recurrence stepped row by row, and the gated RMSNorm (qwen35.md §3.3).

use super::kernels::{axpy_f32, dot_f32};
use super::{inv_rms, sigmoid, silu, CpuAct, CpuBackend};
use crate::{LinearParams, LinearSpec, RowRef};
use rayon::prelude::*;

/// One DeltaNet layer's state for one slot.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuLinearState {
    /// The last K−1 pre-conv inputs, oldest first: `[K−1, channels]`.
    pub conv_tail: Vec<f32>,
    /// Recurrent state per value head, `[value_heads, value_dim, key_dim]` so each output is a contiguous dot.
    pub recurrent: Vec<f32>,
}

impl CpuLinearState {
    pub fn new(spec: &LinearSpec) -> Self {
        CpuLinearState {
            conv_tail: vec![0.0; (spec.conv_kernel - 1) * spec.conv_channels()],
            recurrent: vec![0.0; spec.value_heads * spec.value_dim * spec.key_dim],
        }
    }
}

fn softplus(x: f32) -> f32 {
    // torch's threshold: linear above 20.
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// Scales x to unit L2 norm the way transformers does: x · rsqrt(Σx² + 1e-6).
fn l2_normalize(x: &mut [f32]) {
    let s = 1.0 / (dot_f32(x, x) + 1e-6).sqrt();
    x.iter_mut().for_each(|v| *v *= s);
}

pub(super) fn gated_deltanet(
    p: &LinearParams<CpuBackend>,
    mixed: &CpuAct,
    z: &CpuAct,
    b: &CpuAct,
    a: &CpuAct,
    rows: &[RowRef],
    states: &mut [&mut CpuLinearState],
) -> CpuAct {
    let s = p.spec;
    let channels = s.conv_channels();
    let kk = s.conv_kernel;
    let key_total = s.key_heads * s.key_dim;
    let group = s.value_heads / s.key_heads;

    // 1. Conv + SiLU per slot, walking its rows in order (each row's window is the tail plus itself).
    let mut conv_out = CpuAct::zeros(rows.len(), channels);
    let mut by_slot: Vec<Vec<usize>> = vec![Vec::new(); states.len()];
    for (i, r) in rows.iter().enumerate() {
        by_slot[r.slot].push(i);
    }
    for (slot, idxs) in by_slot.iter().enumerate() {
        let tail = &mut states[slot].conv_tail;
        for &i in idxs {
            let x = mixed.row(i);
            let out = &mut conv_out.data[i * channels..(i + 1) * channels];
            for c in 0..channels {
                let w = &p.conv[c * kk..(c + 1) * kk];
                let mut acc = 0.0f32;
                for j in 0..kk - 1 {
                    acc += tail[j * channels + c] * w[j];
                }
                acc += x[c] * w[kk - 1];
                out[c] = silu(acc);
            }
            if kk > 1 {
                tail.copy_within(channels.., 0);
                tail[(kk - 2) * channels..].copy_from_slice(x);
            }
        }
    }

    // 2. Per (slot, value head): gates and the recurrence over that slot's rows, then the gated norm.
    let mut out = CpuAct::zeros(rows.len(), s.value_heads * s.value_dim);
    let head_state = s.value_dim * s.key_dim;
    let mut jobs: Vec<(usize, usize, &mut [f32])> = Vec::new();
    for (slot, st) in states.iter_mut().enumerate() {
        for (h, chunk) in st.recurrent.chunks_mut(head_state).enumerate() {
            if !by_slot[slot].is_empty() {
                jobs.push((slot, h, chunk));
            }
        }
    }
    let results: Vec<(usize, usize, Vec<f32>)> = jobs
        .into_par_iter()
        .map(|(slot, h, state)| {
            let kh = h / group;
            let a_decay = -p.a_log[h].exp();
            let q_scale = 1.0 / (s.key_dim as f32).sqrt();
            let mut q = vec![0.0f32; s.key_dim];
            let mut k = vec![0.0f32; s.key_dim];
            let mut ys = Vec::with_capacity(by_slot[slot].len() * s.value_dim);
            for &i in &by_slot[slot] {
                let x = conv_out.row(i);
                q.copy_from_slice(&x[kh * s.key_dim..(kh + 1) * s.key_dim]);
                k.copy_from_slice(&x[key_total + kh * s.key_dim..key_total + (kh + 1) * s.key_dim]);
                let v = &x[2 * key_total + h * s.value_dim..2 * key_total + (h + 1) * s.value_dim];
                l2_normalize(&mut q);
                q.iter_mut().for_each(|e| *e *= q_scale);
                l2_normalize(&mut k);
                let beta = sigmoid(b.row(i)[h]);
                let decay = (a_decay * softplus(a.row(i)[h] + p.dt_bias[h])).exp();
                let mut o = vec![0.0f32; s.value_dim];
                for (j, sj) in state.chunks_mut(s.key_dim).enumerate() {
                    sj.iter_mut().for_each(|e| *e *= decay);
                    let kv = dot_f32(sj, &k);
                    let d = beta * (v[j] - kv);
                    axpy_f32(d, &k, sj);
                    o[j] = dot_f32(sj, &q);
                }
                let zr = &z.row(i)[h * s.value_dim..(h + 1) * s.value_dim];
                let inv = inv_rms(&o, p.eps);
                for j in 0..s.value_dim {
                    ys.push(p.norm[j] * (o[j] * inv) * silu(zr[j]));
                }
            }
            (slot, h, ys)
        })
        .collect();
    let cols = out.cols;
    for (slot, h, ys) in results {
        for (n, &i) in by_slot[slot].iter().enumerate() {
            out.data[i * cols + h * s.value_dim..i * cols + (h + 1) * s.value_dim]
                .copy_from_slice(&ys[n * s.value_dim..(n + 1) * s.value_dim]);
        }
    }
    out
}
