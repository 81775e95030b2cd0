//! Gated full attention on the CPU: per-head q/k norms, partial NeoX RoPE, KV append, causal GQA softmax
//! attention over each row's slot keys in position order, and the sigmoid output gate (qwen35.md §3.5).

use super::kernels::{axpy_f32, dot_f32};
use super::{inv_rms, sigmoid, CpuAct, CpuBackend};
use crate::{AttnParams, AttnSpec, RowRef};
use rayon::prelude::*;

/// Keys and values of one attention layer for one slot, f32, `[position, kv_heads, head_dim]`.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuKv {
    pub keys: Vec<f32>,
    pub values: Vec<f32>,
    row: usize,
}

impl CpuKv {
    pub fn new(spec: &AttnSpec) -> Self {
        CpuKv {
            keys: Vec::new(),
            values: Vec::new(),
            row: spec.kv_heads * spec.head_dim,
        }
    }
    pub fn len(&self) -> usize {
        self.keys.len() / self.row
    }
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
    /// Drops rows from `len` on (rejected drafts).
    pub fn truncate(&mut self, len: usize) {
        self.keys.truncate(len * self.row);
        self.values.truncate(len * self.row);
    }
}

/// NeoX-style (rotate-half) RoPE on the first `rotary_dim` dims of one head vector.
fn rope(x: &mut [f32], pos: usize, rotary_dim: usize, theta: f64) {
    let half = rotary_dim / 2;
    for j in 0..half {
        let inv_freq = theta.powf(-(2.0 * j as f64) / rotary_dim as f64);
        let angle = pos as f64 * inv_freq;
        let (sin, cos) = (angle.sin() as f32, angle.cos() as f32);
        let (x1, x2) = (x[j], x[j + half]);
        x[j] = x1 * cos - x2 * sin;
        x[j + half] = x2 * cos + x1 * sin;
    }
}

fn norm_head(x: &mut [f32], w: &[f32], eps: f32) {
    let s = inv_rms(x, eps);
    for (v, &wi) in x.iter_mut().zip(w) {
        *v = *v * s * wi;
    }
}

pub(super) fn gated_attention(
    p: &AttnParams<CpuBackend>,
    qg: &CpuAct,
    k: &CpuAct,
    v: &CpuAct,
    rows: &[RowRef],
    states: &mut [&mut CpuKv],
) -> CpuAct {
    let s = p.spec;
    let hd = s.head_dim;
    let group = s.heads / s.kv_heads;
    // Append every row's normed, rotated key and its value; rows of a slot arrive in position order.
    for (i, r) in rows.iter().enumerate() {
        let kv = &mut *states[r.slot];
        debug_assert_eq!(kv.len(), r.pos, "rows must extend their slot in order");
        let mut key = k.row(i).to_vec();
        for head in key.chunks_mut(hd) {
            norm_head(head, &p.k_norm, p.eps);
            rope(head, r.pos, s.rotary_dim, s.rope_theta);
        }
        kv.keys.extend_from_slice(&key);
        kv.values.extend_from_slice(v.row(i));
    }
    let kv_row = s.kv_heads * hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let states: Vec<&CpuKv> = states.iter().map(|s| &**s).collect();
    let mut out = CpuAct::zeros(rows.len(), s.heads * hd);
    out.data
        .par_chunks_mut(hd)
        .enumerate()
        .for_each(|(idx, o)| {
            let (i, h) = (idx / s.heads, idx % s.heads);
            let r = rows[i];
            let kv = states[r.slot];
            let qrow = qg.row(i);
            let mut q = qrow[h * 2 * hd..h * 2 * hd + hd].to_vec();
            let gate = &qrow[h * 2 * hd + hd..(h + 1) * 2 * hd];
            norm_head(&mut q, &p.q_norm, p.eps);
            rope(&mut q, r.pos, s.rotary_dim, s.rope_theta);
            let kvh = h / group;
            let n = r.pos + 1;
            let mut scores: Vec<f32> = (0..n)
                .map(|t| {
                    dot_f32(
                        &q,
                        &kv.keys[t * kv_row + kvh * hd..t * kv_row + (kvh + 1) * hd],
                    ) * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for sc in scores.iter_mut() {
                *sc = (*sc - max).exp();
                sum += *sc;
            }
            for (t, &w) in scores.iter().enumerate() {
                axpy_f32(
                    w / sum,
                    &kv.values[t * kv_row + kvh * hd..t * kv_row + (kvh + 1) * hd],
                    o,
                );
            }
            for (e, &g) in o.iter_mut().zip(gate) {
                *e *= sigmoid(g);
            }
        });
    out
}
