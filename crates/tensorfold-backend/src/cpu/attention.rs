//! Gated full attention on the CPU over a round: per-head q/k norms, partial NeoX RoPE, causal GQA softmax
//! attention over the slot's committed keys then the row's ancestors in the round (so a tree row sees exactly the
//! keys the plain path would), the sigmoid output gate; rows stay pending until `keep` pages them in.

use super::kernels::{axpy_f32, axpys_strided_f32, dot_f32, dots_strided_f32};
use super::pages::{PagePool, PAGE_ROWS};
use super::{inv_rms, sigmoid, CpuAct, CpuBackend};
use crate::{AttnParams, AttnSpec, RowRef};
use rayon::prelude::*;
use std::sync::Arc;

/// Keys and values of one attention layer for one slot: committed rows in pool pages (keys then values within a
/// page, `[PAGE_ROWS, kv_heads·head_dim]` each), plus the current round's pending rows.
#[derive(Debug)]
pub struct CpuKv {
    pool: Arc<PagePool>,
    pages: Vec<Box<[f32]>>,
    len: usize,
    row: usize,
    /// (round row index, key, value) of rows computed this round and not yet kept.
    pending: Vec<(usize, Vec<f32>, Vec<f32>)>,
}

impl Drop for CpuKv {
    fn drop(&mut self) {
        for p in self.pages.drain(..) {
            self.pool.give_back(p);
        }
    }
}

impl CpuKv {
    pub fn new(spec: &AttnSpec, pool: Arc<PagePool>) -> Self {
        CpuKv {
            pool,
            pages: Vec::new(),
            len: 0,
            row: spec.kv_heads * spec.head_dim,
            pending: Vec::new(),
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn key(&self, t: usize) -> &[f32] {
        let off = (t % PAGE_ROWS) * self.row;
        &self.pages[t / PAGE_ROWS][off..off + self.row]
    }
    fn value(&self, t: usize) -> &[f32] {
        let off = (PAGE_ROWS + t % PAGE_ROWS) * self.row;
        &self.pages[t / PAGE_ROWS][off..off + self.row]
    }
    /// Appends one committed row, taking a page from the pool when the last one is full.
    pub fn push(&mut self, key: &[f32], value: &[f32]) -> Result<(), String> {
        if self.len == self.pages.len() * PAGE_ROWS {
            let page = self.pool.take(2 * PAGE_ROWS * self.row).ok_or_else(|| {
                format!(
                    "KV page pool exhausted ({} pages in use)",
                    self.pool.capacity()
                )
            })?;
            self.pages.push(page);
        }
        let t = self.len;
        let page = &mut self.pages[t / PAGE_ROWS];
        let ko = (t % PAGE_ROWS) * self.row;
        page[ko..ko + self.row].copy_from_slice(key);
        let vo = (PAGE_ROWS + t % PAGE_ROWS) * self.row;
        page[vo..vo + self.row].copy_from_slice(value);
        self.len += 1;
        Ok(())
    }
    /// Commits the pending rows on `path` (round row indices, in position order) and drops the others.
    pub fn keep(&mut self, path: &[usize]) -> Result<(), String> {
        let pending = std::mem::take(&mut self.pending);
        for &r in path {
            let (_, k, v) = pending
                .iter()
                .find(|p| p.0 == r)
                .ok_or_else(|| format!("row {r} is not pending"))?;
            self.push(k, v)?;
        }
        Ok(())
    }
    /// Committed keys and values as plain vectors (prompt-cache snapshots).
    pub fn export(&self) -> (Vec<f32>, Vec<f32>) {
        let mut k = Vec::with_capacity(self.len * self.row);
        let mut v = Vec::with_capacity(self.len * self.row);
        for t in 0..self.len {
            k.extend_from_slice(self.key(t));
            v.extend_from_slice(self.value(t));
        }
        (k, v)
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

/// Round rows from the slot's first round row to `i`, following parents: the row's ancestors, root first.
pub(super) fn ancestry(rows: &[RowRef], i: usize) -> Vec<usize> {
    let mut path = vec![i];
    let mut cur = i;
    while let Some(p) = rows[cur].parent {
        path.push(p);
        cur = p;
    }
    path.reverse();
    path
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
    for st in states.iter_mut() {
        st.pending.clear();
    }
    // Every row's normed, rotated key and its value wait as pending rows of their slot.
    let mut local = vec![0usize; rows.len()];
    for (i, r) in rows.iter().enumerate() {
        let kv = &mut *states[r.slot];
        let mut key = k.row(i).to_vec();
        for head in key.chunks_mut(hd) {
            norm_head(head, &p.k_norm, p.eps);
            rope(head, r.pos, s.rotary_dim, s.rope_theta);
        }
        local[i] = kv.pending.len();
        kv.pending.push((i, key, v.row(i).to_vec()));
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let states: Vec<&CpuKv> = states.iter().map(|s| &**s).collect();
    let paths: Vec<Vec<usize>> = (0..rows.len()).map(|i| ancestry(rows, i)).collect();
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
            let head = kvh * hd..(kvh + 1) * hd;
            let path = &paths[i];
            // Keys in position order: committed rows, then this row's ancestors and itself.
            let key_at = |t: usize| -> &[f32] {
                if t < kv.len {
                    &kv.key(t)[head.clone()]
                } else {
                    &kv.pending[local[path[t - kv.len]]].1[head.clone()]
                }
            };
            let value_at = |t: usize| -> &[f32] {
                if t < kv.len {
                    &kv.value(t)[head.clone()]
                } else {
                    &kv.pending[local[path[t - kv.len]]].2[head.clone()]
                }
            };
            let n = kv.len + path.len();
            // Committed keys a page at a time (one call per page; the same bits as one dot per key).
            let mut scores = vec![0f32; n];
            for (p, page) in scores[..kv.len].chunks_mut(PAGE_ROWS).enumerate() {
                let keys = &kv.pages[p][head.start..];
                dots_strided_f32(&q, keys, kv.row, page);
            }
            for (t, sc) in scores.iter_mut().enumerate().skip(kv.len) {
                *sc = dot_f32(&q, key_at(t));
            }
            for sc in scores.iter_mut() {
                *sc *= scale;
            }
            let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for sc in scores.iter_mut() {
                *sc = (*sc - max).exp();
                sum += *sc;
            }
            // The weights in place (scores are not needed past this point).
            for sc in scores.iter_mut() {
                *sc /= sum;
            }
            let alphas = &scores;
            // Committed values a page at a time (o stays in registers; the same bits as one axpy per key).
            for (p, page) in alphas[..kv.len].chunks(PAGE_ROWS).enumerate() {
                let values = &kv.pages[p][PAGE_ROWS * kv.row + head.start..];
                axpys_strided_f32(page, values, kv.row, o);
            }
            for (t, &a) in alphas.iter().enumerate().skip(kv.len) {
                axpy_f32(a, value_at(t), o);
            }
            for (e, &g) in o.iter_mut().zip(gate) {
                *e *= sigmoid(g);
            }
        });
    out
}
