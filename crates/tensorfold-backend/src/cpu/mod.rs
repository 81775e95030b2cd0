//! The CPU backend: f32 activations, weights read in their stored format, rayon across output features and
//! heads, SIMD picked at run time; every op computes a row with the same arithmetic whatever else is in the call.

mod attention;
mod deltanet;
pub mod kernels;
pub mod pages;

use crate::{AttnParams, AttnSpec, Backend, LinearParams, LinearSpec, RowRef};
use rayon::prelude::*;
use tensorfold_core::sampling::{
    draw_from_top, draw_keyed, draw_rows_keyed, edited_row, row_top, top_count, KeyedRule,
    LogitEdit, RowDraw,
};
use tensorfold_core::{CoreError, Result, StoredMatrix};

pub use attention::CpuKv;
pub use deltanet::CpuLinearState;

/// Row-major f32 activations.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuAct {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl CpuAct {
    pub fn zeros(rows: usize, cols: usize) -> Self {
        CpuAct {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }
    pub fn row(&self, r: usize) -> &[f32] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }
}

/// The CPU backend; clones share one KV page pool.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    pool: std::sync::Arc<pages::PagePool>,
    /// Report `draws_on_device`, so the engine draws every logit row of a round at once as it does on a GPU.
    eager_draws: bool,
    /// How KV pages store keys and values; they are rounded to it where they are made.
    kv_dtype: crate::KvDtype,
}

impl Default for CpuBackend {
    /// A backend whose KV pool is bounded only by memory.
    fn default() -> Self {
        CpuBackend::with_kv_pages(usize::MAX / 2)
    }
}

impl CpuBackend {
    /// A backend whose KV pool holds at most `pages` pages of `pages::PAGE_ROWS` positions (per attention layer).
    pub fn with_kv_pages(pages: usize) -> Self {
        CpuBackend {
            pool: pages::PagePool::new(pages),
            eager_draws: false,
            kv_dtype: crate::KvDtype::F32,
        }
    }

    /// This backend with keys and values rounded to `dtype` as they are made (`--kv-cache-dtype`), as the CUDA
    /// backend stores them.
    pub fn with_kv_dtype(mut self, dtype: crate::KvDtype) -> Self {
        self.kv_dtype = dtype;
        self
    }

    /// This backend with `draws_on_device` true: the engine's GPU way of drawing (every logit row of a round in
    /// one `draw_rows` call) with the CPU's arithmetic, for tests that it changes no token.
    pub fn drawing_every_row(mut self) -> Self {
        self.eager_draws = true;
        self
    }
}

pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// 1 / sqrt(mean(x²) + eps), with the sum in the fixed SIMD order of `dot_f32`.
pub(crate) fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let ss = kernels::dot_f32(x, x);
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

impl Backend for CpuBackend {
    type Matrix = StoredMatrix;
    type Vector = Vec<f32>;
    type Act = CpuAct;
    type LinearState = CpuLinearState;
    type KvState = CpuKv;
    type LinearSnapshot = CpuLinearState;
    type KvSnapshot = (Vec<f32>, Vec<f32>);

    fn name(&self) -> String {
        format!(
            "cpu ({} threads, {})",
            rayon::current_num_threads(),
            kernels::simd_level()
        )
    }
    fn matrix(&self, m: &StoredMatrix) -> Result<StoredMatrix> {
        Ok(m.clone())
    }
    fn vector(&self, v: &[f32]) -> Result<Vec<f32>> {
        Ok(v.to_vec())
    }
    fn new_linear_state(&self, spec: &LinearSpec) -> CpuLinearState {
        CpuLinearState::new(spec)
    }
    fn new_kv_state(&self, spec: &AttnSpec) -> CpuKv {
        CpuKv::new(spec, self.pool.clone(), self.kv_dtype)
    }
    fn kv_len(&self, kv: &CpuKv) -> usize {
        kv.len()
    }
    fn keep_linear(
        &self,
        spec: &LinearSpec,
        st: &mut CpuLinearState,
        path: &[usize],
    ) -> Result<()> {
        st.keep(spec, path).map_err(CoreError::Invalid)
    }
    fn keep_kv(&self, st: &mut CpuKv, path: &[usize]) -> Result<()> {
        st.keep(path).map_err(CoreError::Resource)
    }
    fn snapshot_linear(&self, st: &CpuLinearState) -> CpuLinearState {
        st.committed_copy()
    }
    fn restore_linear(&self, snap: &CpuLinearState) -> CpuLinearState {
        snap.clone()
    }
    fn snapshot_kv(&self, st: &CpuKv) -> (Vec<f32>, Vec<f32>) {
        st.export()
    }
    fn restore_kv(&self, spec: &AttnSpec, snap: &(Vec<f32>, Vec<f32>)) -> Result<CpuKv> {
        let mut kv = CpuKv::new(spec, self.pool.clone(), self.kv_dtype);
        let row = spec.kv_heads * spec.head_dim;
        for (k, v) in snap.0.chunks(row).zip(snap.1.chunks(row)) {
            kv.push(k, v).map_err(CoreError::Resource)?;
        }
        Ok(kv)
    }
    fn linear_snapshot_bytes(&self, snap: &CpuLinearState) -> usize {
        4 * (snap.conv_tail.len() + snap.recurrent.len())
    }
    fn kv_snapshot_bytes(&self, snap: &(Vec<f32>, Vec<f32>)) -> usize {
        4 * (snap.0.len() + snap.1.len())
    }
    fn kv_pages(&self) -> (usize, usize, usize) {
        (pages::PAGE_ROWS, self.pool.capacity(), self.pool.in_use())
    }
    fn kv_dtype(&self) -> crate::KvDtype {
        self.kv_dtype
    }

    fn embed(&self, table: &StoredMatrix, ids: &[u32]) -> CpuAct {
        let view = table.view();
        let cols = view.cols();
        let mut out = CpuAct::zeros(ids.len(), cols);
        out.data
            .par_chunks_mut(cols)
            .zip(ids.par_iter())
            .for_each(|(row, &id)| {
                kernels::matrix_row(&view, id as usize, row);
            });
        out
    }

    fn rms_norm(&self, x: &CpuAct, w: &Vec<f32>, eps: f32) -> CpuAct {
        let mut out = x.clone();
        out.data.par_chunks_mut(x.cols).for_each(|row| {
            let s = inv_rms(row, eps);
            for (v, &wi) in row.iter_mut().zip(w) {
                *v = *v * s * wi;
            }
        });
        out
    }

    fn project(&self, x: &CpuAct, w: &StoredMatrix) -> CpuAct {
        let view = w.view();
        debug_assert_eq!(x.cols, view.cols());
        let mut out = CpuAct::zeros(x.rows, view.rows());
        kernels::project(&x.data, x.rows, &view, &mut out.data);
        out
    }

    fn add_assign(&self, x: &mut CpuAct, y: &CpuAct) {
        for (a, b) in x.data.iter_mut().zip(&y.data) {
            *a += *b;
        }
    }

    fn swiglu(&self, gate: &CpuAct, up: &CpuAct) -> CpuAct {
        let data = gate
            .data
            .iter()
            .zip(&up.data)
            .map(|(&g, &u)| silu(g) * u)
            .collect();
        CpuAct {
            rows: gate.rows,
            cols: gate.cols,
            data,
        }
    }

    fn select_rows(&self, x: &CpuAct, rows: &[usize]) -> CpuAct {
        let mut data = Vec::with_capacity(rows.len() * x.cols);
        for &r in rows {
            data.extend_from_slice(x.row(r));
        }
        CpuAct {
            rows: rows.len(),
            cols: x.cols,
            data,
        }
    }

    fn gated_deltanet(
        &self,
        p: &LinearParams<Self>,
        mixed: &CpuAct,
        z: &CpuAct,
        b: &CpuAct,
        a: &CpuAct,
        rows: &[RowRef],
        states: &mut [&mut CpuLinearState],
    ) -> CpuAct {
        deltanet::gated_deltanet(p, mixed, z, b, a, rows, states)
    }

    fn gated_attention(
        &self,
        p: &AttnParams<Self>,
        qg: &CpuAct,
        k: &CpuAct,
        v: &CpuAct,
        rows: &[RowRef],
        states: &mut [&mut CpuKv],
    ) -> CpuAct {
        attention::gated_attention(p, qg, k, v, rows, states)
    }

    fn to_host(&self, x: &CpuAct) -> Vec<f32> {
        x.data.clone()
    }
    fn act_shape(&self, x: &CpuAct) -> (usize, usize) {
        (x.rows, x.cols)
    }
    fn draws_on_device(&self) -> bool {
        self.eager_draws
    }
    fn rows_to_host(&self, x: &CpuAct, first: usize, n: usize) -> Vec<f32> {
        x.data[first * x.cols..(first + n) * x.cols].to_vec()
    }
    fn draw_rows(&self, logits: &CpuAct, draws: &[RowDraw], edits: &[LogitEdit]) -> Vec<u32> {
        if !self.eager_draws {
            return draw_rows_keyed(&logits.data, logits.cols, draws, edits);
        }
        // As a GPU draws: each row with its edits applied to a copy, and a cut row from its best ranks and total
        // (`row_top`), the whole row only when they end before the cut does.
        draws
            .iter()
            .map(|d| {
                let row = edited_row(logits.row(d.row), d.row, edits);
                let from_top = match d.rule {
                    KeyedRule::Cut(cut) => top_count(&cut).and_then(|c| {
                        draw_from_top(&row_top(&row, cut.inv_t, c), &cut, d.position)
                    }),
                    _ => None,
                };
                from_top.unwrap_or_else(|| draw_keyed(&row, d.rule, d.position))
            })
            .collect()
    }
}
