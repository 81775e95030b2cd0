//! Gated full attention on the CPU over a round: per-head q/k norms, partial NeoX RoPE, causal GQA softmax
//! attention over the slot's committed keys then the row's ancestors in the round (so a tree row sees exactly the
//! keys the plain path would), the sigmoid output gate; rows stay pending until `keep` pages them in.

use super::kernels::{axpy_f32, axpys_strided_f32, dot_f32, dots_strided_f32};
use super::pages::{Page, PagePool, PAGE_ROWS};
use super::{inv_rms, sigmoid, CpuAct, CpuBackend};
use crate::{AttnParams, AttnSpec, KvDtype, RowRef};
use rayon::prelude::*;
use std::sync::Arc;

/// Keys and values of one attention layer for one slot: committed rows in pool pages (keys then values within a
/// page, `[PAGE_ROWS, kv_heads·head_dim]` each, f32 or bf16), plus the current round's pending rows (already
/// rounded to the pages' dtype, so a key is the same number pending or committed).
#[derive(Debug)]
pub struct CpuKv {
    pool: Arc<PagePool>,
    pages: Vec<Page>,
    len: usize,
    row: usize,
    dtype: KvDtype,
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
    pub fn new(spec: &AttnSpec, pool: Arc<PagePool>, dtype: KvDtype) -> Self {
        CpuKv {
            pool,
            pages: Vec::new(),
            len: 0,
            row: spec.kv_heads * spec.head_dim,
            dtype,
            pending: Vec::new(),
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Appends one committed row (rounded to the pages' dtype already), taking a page from the pool when the last
    /// one is full.
    pub fn push(&mut self, key: &[f32], value: &[f32]) -> Result<(), String> {
        if self.len == self.pages.len() * PAGE_ROWS {
            let page = self
                .pool
                .take(self.dtype, 2 * PAGE_ROWS * self.row)
                .ok_or_else(|| {
                    format!(
                        "KV page pool exhausted ({} pages in use)",
                        self.pool.capacity()
                    )
                })?;
            self.pages.push(page);
        }
        let t = self.len;
        let page = &mut self.pages[t / PAGE_ROWS];
        page.write((t % PAGE_ROWS) * self.row, key);
        page.write((PAGE_ROWS + t % PAGE_ROWS) * self.row, value);
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
        for (pg, page) in self
            .pages
            .iter()
            .enumerate()
            .take(self.len.div_ceil(PAGE_ROWS))
        {
            let n = PAGE_ROWS.min(self.len - pg * PAGE_ROWS);
            page.read(0, n, self.row, self.row, &mut k);
            page.read(PAGE_ROWS * self.row, n, self.row, self.row, &mut v);
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
        // Rounded where made, to the state's page dtype, so the round's own rows and the committed ones are the
        // same values on every path.
        let value: Vec<f32> = v.row(i).iter().map(|&x| kv.dtype.round(x)).collect();
        key.iter_mut().for_each(|x| *x = kv.dtype.round(*x));
        local[i] = kv.pending.len();
        kv.pending.push((i, key, value));
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let states: Vec<&CpuKv> = states.iter().map(|s| &**s).collect();
    let paths: Vec<Vec<usize>> = (0..rows.len()).map(|i| ancestry(rows, i)).collect();
    // Every row's normed, rotated queries, [rows, heads, hd].
    let mut qs = vec![0f32; rows.len() * s.heads * hd];
    qs.par_chunks_mut(s.heads * hd)
        .enumerate()
        .for_each(|(i, qi)| {
            let qrow = qg.row(i);
            for (h, q) in qi.chunks_mut(hd).enumerate() {
                q.copy_from_slice(&qrow[h * 2 * hd..h * 2 * hd + hd]);
                norm_head(q, &p.q_norm, p.eps);
                rope(q, rows[i].pos, s.rotary_dim, s.rope_theta);
            }
        });
    // Work units: the queries of one slot's rows that share a KV head, a chunk at a time, so each page of
    // committed keys and values is read once per chunk rather than once per query.
    let mut units: Vec<Unit> = Vec::new();
    for slot in 0..states.len() {
        let slot_rows: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].slot == slot).collect();
        for kvh in 0..s.kv_heads {
            let queries: Vec<(usize, usize)> = slot_rows
                .iter()
                .flat_map(|&i| (kvh * group..(kvh + 1) * group).map(move |h| (i, h)))
                .collect();
            for chunk in queries.chunks(QUERY_CHUNK) {
                units.push((slot, kvh, chunk.to_vec()));
            }
        }
    }
    let ctx = Ctx {
        gate_of: &|i: usize, h: usize| &qg.row(i)[h * 2 * hd + hd..(h + 1) * 2 * hd],
        qs: &qs,
        heads: s.heads,
        hd,
        scale,
        paths: &paths,
        local: &local,
    };
    let done: Vec<Vec<f32>> = units
        .par_iter()
        .map(|(slot, kvh, queries)| attend(&ctx, states[*slot], *kvh, queries))
        .collect();
    let mut out = CpuAct::zeros(rows.len(), s.heads * hd);
    for ((_, _, queries), o) in units.iter().zip(&done) {
        for (&(i, h), oq) in queries.iter().zip(o.chunks(hd)) {
            out.data[(i * s.heads + h) * hd..][..hd].copy_from_slice(oq);
        }
    }
    out
}

/// (slot, KV head, the (round row, head) queries) of one work unit.
type Unit = (usize, usize, Vec<(usize, usize)>);

/// Queries per work unit: their rows of scores and outputs stay in L1/L2 beside one page of keys or values.
const QUERY_CHUNK: usize = 32;

/// What every work unit reads.
struct Ctx<'a> {
    gate_of: &'a (dyn Fn(usize, usize) -> &'a [f32] + Sync),
    qs: &'a [f32],
    heads: usize,
    hd: usize,
    scale: f32,
    paths: &'a [Vec<usize>],
    local: &'a [usize],
}

/// Gated attention outputs of `queries` ((round row, head) pairs of one slot sharing KV head `kvh`), [len, hd].
/// Per query the arithmetic is fixed: scores over committed keys (a page at a time), then over the row's
/// ancestors and itself; softmax in position order; values in the same order; the sigmoid gate.
fn attend(c: &Ctx<'_>, kv: &CpuKv, kvh: usize, queries: &[(usize, usize)]) -> Vec<f32> {
    let hd = c.hd;
    let head = kvh * hd..(kvh + 1) * hd;
    let q_of = |(i, h): (usize, usize)| &c.qs[(i * c.heads + h) * hd..][..hd];
    let longest = queries
        .iter()
        .map(|&(i, _)| c.paths[i].len())
        .max()
        .unwrap_or(0);
    let width = kv.len + longest;
    let mut scores = vec![0f32; queries.len() * width];
    // Committed keys a page at a time, every query of the unit against each page (each score has the bits of
    // one dot per key). bf16 pages are widened (exactly) into `wide` first, this head's n keys or values
    // [n, hd]: the same dots and axpys on the same numbers, at half the bytes read from memory.
    let mut wide = Vec::new();
    for (pg, page) in kv.pages.iter().take(kv.len.div_ceil(PAGE_ROWS)).enumerate() {
        let (t0, n) = (pg * PAGE_ROWS, PAGE_ROWS.min(kv.len - pg * PAGE_ROWS));
        let (keys, stride) = page.rows(head.start, n, hd, kv.row, &mut wide);
        for (qi, &q) in queries.iter().enumerate() {
            dots_strided_f32(q_of(q), keys, stride, &mut scores[qi * width + t0..][..n]);
        }
    }
    for (qi, &(i, h)) in queries.iter().enumerate() {
        let path = &c.paths[i];
        let sc = &mut scores[qi * width..][..kv.len + path.len()];
        for (t, &r) in path.iter().enumerate() {
            sc[kv.len + t] = dot_f32(q_of((i, h)), &kv.pending[c.local[r]].1[head.clone()]);
        }
        for v in sc.iter_mut() {
            *v *= c.scale;
        }
        let max = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f32;
        for v in sc.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        // The weights in place (scores are not needed past this point).
        for v in sc.iter_mut() {
            *v /= sum;
        }
    }
    // Committed values a page at a time in position order (each output's bits: one axpy per key, in order).
    let mut out = vec![0f32; queries.len() * hd];
    for (pg, page) in kv.pages.iter().take(kv.len.div_ceil(PAGE_ROWS)).enumerate() {
        let (t0, n) = (pg * PAGE_ROWS, PAGE_ROWS.min(kv.len - pg * PAGE_ROWS));
        let (values, stride) = page.rows(PAGE_ROWS * kv.row + head.start, n, hd, kv.row, &mut wide);
        for (qi, o) in out.chunks_mut(hd).enumerate() {
            axpys_strided_f32(&scores[qi * width + t0..][..n], values, stride, o);
        }
    }
    for (qi, (&(i, h), o)) in queries.iter().zip(out.chunks_mut(hd)).enumerate() {
        let path = &c.paths[i];
        for (t, &r) in path.iter().enumerate() {
            let a = scores[qi * width + kv.len + t];
            axpy_f32(a, &kv.pending[c.local[r]].2[head.clone()], o);
        }
        for (e, &g) in o.iter_mut().zip((c.gate_of)(i, h)) {
            *e *= sigmoid(g);
        }
    }
    out
}
