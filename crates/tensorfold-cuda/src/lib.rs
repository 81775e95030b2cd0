//! The CUDA backend: the Backend trait on an NVIDIA GPU through cudarc (dynamic loading, no toolkit at build
//! time), with CUDA C kernels compiled by NVRTC at start; every op is row-invariant, like its CPU twin.

mod ahead;
mod attention;
mod deltanet;
pub mod device;
mod graph;
pub mod libs;
pub mod nvrtc;
mod ops;
mod profile;
mod project;
mod round;
mod sample;
mod scratch;
pub mod selftest;
mod stage;

use std::sync::Arc;
use tensorfold_backend::{
    AttnParams, AttnSpec, Backend, KvDtype, LinearParams, LinearSpec, RowRef,
};
use tensorfold_core::sampling::{LogitEdit, RowDraw, RowTop};
use tensorfold_core::{CoreError, Result, StoredMatrix};

pub use attention::{CudaKv, CudaKvSnapshot, KvPool, PAGE_ROWS};
pub use deltanet::{CudaLinear, CudaLinearSnapshot};
pub use graph::GraphStats;
pub use ops::{CudaAct, CudaMatrix, CudaVector};

/// Why the CUDA backend could not start (no driver, no GPU, no NVRTC, a kernel that failed to build).
#[derive(Debug, Clone)]
pub struct CudaUnavailable(pub String);

impl std::fmt::Display for CudaUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CUDA unavailable: {}", self.0)
    }
}

impl std::error::Error for CudaUnavailable {}

/// The CUDA backend; clones share the device, its stream and one KV page pool.
#[derive(Clone)]
pub struct CudaBackend {
    pub(crate) dev: Arc<device::Dev>,
    pool: Arc<KvPool>,
    kv_dtype: KvDtype,
}

impl CudaBackend {
    /// Opens GPU `ordinal` with an unbounded KV pool. A machine without a GPU, driver or NVRTC gets a clear error.
    pub fn new(ordinal: usize) -> std::result::Result<Self, CudaUnavailable> {
        Self::with_kv_pages(ordinal, usize::MAX / 2)
    }

    /// As `new`, with at most `pages` KV pages of `PAGE_ROWS` positions (all attention layers together).
    pub fn with_kv_pages(
        ordinal: usize,
        pages: usize,
    ) -> std::result::Result<Self, CudaUnavailable> {
        let dev = device::Dev::open(ordinal).map_err(CudaUnavailable)?;
        Ok(CudaBackend {
            dev: Arc::new(dev),
            pool: KvPool::new(pages),
            kv_dtype: KvDtype::F32,
        })
    }

    /// This backend with its KV pages stored as `dtype` (`--kv-cache-dtype`); set before any state is made.
    pub fn with_kv_dtype(mut self, dtype: KvDtype) -> Self {
        self.kv_dtype = dtype;
        self
    }

    /// Device, driver and kernel provenance, for logs.
    pub fn info(&self) -> &str {
        &self.dev.info
    }

    /// Device-to-device copy bandwidth in bytes per second (bytes read + bytes written), best of several copies.
    pub fn copy_bandwidth(&self, bytes: usize) -> f64 {
        let n = bytes / 4;
        let src = self.dev.zeros::<f32>(n);
        let mut dst = self.dev.zeros::<f32>(n);
        let mut best = 0.0f64;
        for _ in 0..6 {
            self.dev.sync();
            let t = std::time::Instant::now();
            for _ in 0..4 {
                self.dev.copy(&src, &mut dst, n);
            }
            self.dev.sync();
            best = best.max((8 * 4 * n) as f64 / t.elapsed().as_secs_f64());
        }
        best
    }

    /// Free and total device memory in bytes, once the queued work has finished (the scratch pools keep what they
    /// took, so after a round of the widest shape this is what is left for more KV pages).
    pub fn memory(&self) -> std::result::Result<(usize, usize), String> {
        self.dev.sync();
        self.dev
            .ctx
            .bind_to_thread()
            .and_then(|()| cudarc::driver::result::mem_get_info())
            .map_err(|e| format!("device memory info: {e:?}"))
    }

    /// Limits the KV cache to `pages` pages (`PAGE_ROWS` positions of one attention layer's keys and values each,
    /// `kv_page_bytes` bytes); the engine then admits a request only while its pages can be reserved.
    pub fn set_kv_pages(&self, pages: usize) {
        self.pool.set_capacity(pages)
    }

    /// KV pages allocated and free for reuse (pages a finished round gave back).
    pub fn kv_cached_pages(&self) -> usize {
        self.pool.cached()
    }

    /// Bytes of one KV page for attention rows of `row` elements (kv heads × head dim): its keys and values, as
    /// this backend stores them.
    pub fn kv_page_bytes(&self, row: usize) -> usize {
        4 * attention::page_words(row, self.kv_dtype)
    }

    /// With TENSORFOLD_CUDA_PROFILE=1: forgets the launches recorded so far.
    pub fn profile_reset(&self) {
        self.dev.sync();
        self.dev.profile.reset();
    }

    /// With TENSORFOLD_CUDA_PROFILE=1: GPU and host time by kernel since the last reset (None when off).
    pub fn profile_report(&self) -> Option<String> {
        self.dev.sync();
        self.dev.profile.enabled.then(|| self.dev.profile.report())
    }

    /// Waits for every queued op (for timing).
    pub fn synchronize(&self) {
        self.dev.sync();
    }

    /// An activation from host rows (tests, drafters).
    pub fn act_from_host(&self, rows: usize, cols: usize, data: &[f32]) -> CudaAct {
        assert_eq!(
            data.len(),
            rows * cols,
            "act_from_host: {rows}×{cols} needs {} floats",
            rows * cols
        );
        CudaAct::from_buf(rows, cols, Arc::new(self.dev.upload_buf(data)))
    }
}

impl CudaBackend {
    /// Kernels launched so far (the self-test checks which ops share launches; `bench` prints them per round).
    pub fn launches(&self) -> usize {
        self.dev.launches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// CUDA graph counts so far: segments sent as graphs and plainly, graphs built, nodes updated (None when
    /// graphs are off: `TENSORFOLD_CUDA_GRAPHS=0` or profiling).
    pub fn graph_stats(&self) -> Option<GraphStats> {
        self.dev.graph_stats()
    }

    /// A projection with the 4-bit weight stream's pipeline depth given (0 = direct loads), whatever the
    /// process default: for the self-test, which checks that every depth gives the same bits.
    pub(crate) fn project_staged(&self, x: &CudaAct, w: &CudaMatrix, stages: usize) -> CudaAct {
        project::project_staged(&self.dev, x, w, stages)
    }

    /// A projection on the decode kernels (`stages` as above) or, when `gemm`, on the prompt kernel, at any row
    /// count: for the self-test's bit-for-bit comparison of the two.
    pub(crate) fn project_layout(
        &self,
        x: &CudaAct,
        w: &CudaMatrix,
        stages: usize,
        gemm: bool,
    ) -> CudaAct {
        project::project_layout(&self.dev, x, w, stages, gemm)
    }

    /// A projection on the wgmma prompt kernel, where the device, the matrix and x's form allow it: for the
    /// self-test's check that Hopper takes it.
    pub(crate) fn project_wgmma_prompt(&self, x: &CudaAct, w: &CudaMatrix) -> Option<CudaAct> {
        project::project_wgmma_prompt(&self.dev, x, w)
    }
}

impl Backend for CudaBackend {
    type Matrix = CudaMatrix;
    type Vector = CudaVector;
    type Act = CudaAct;
    type LinearState = CudaLinear;
    type KvState = CudaKv;
    type LinearSnapshot = CudaLinearSnapshot;
    type KvSnapshot = CudaKvSnapshot;

    fn name(&self) -> String {
        format!("cuda: {}", self.dev.info)
    }
    fn matrix(&self, m: &StoredMatrix) -> Result<CudaMatrix> {
        ops::upload_matrix(&self.dev, m)
    }
    fn vector(&self, v: &[f32]) -> Result<CudaVector> {
        Ok(CudaVector {
            _send: ops::SendFirst(self.dev.clone()),
            buf: self.dev.upload(v),
            len: v.len(),
        })
    }
    fn new_linear_state(&self, spec: &LinearSpec) -> CudaLinear {
        CudaLinear::new(self.dev.clone(), spec)
    }
    fn new_kv_state(&self, spec: &AttnSpec) -> CudaKv {
        CudaKv::new(self.dev.clone(), self.pool.clone(), spec, self.kv_dtype)
    }
    fn kv_len(&self, kv: &CudaKv) -> usize {
        kv.len()
    }
    fn keep_linear(&self, spec: &LinearSpec, st: &mut CudaLinear, path: &[usize]) -> Result<()> {
        self.keep_linear_many(spec, &mut [(st, path)])
    }
    fn keep_kv(&self, st: &mut CudaKv, path: &[usize]) -> Result<()> {
        self.keep_kv_many(&mut [(st, path)])
    }
    fn keep_linear_many(
        &self,
        spec: &LinearSpec,
        items: &mut [(&mut CudaLinear, &[usize])],
    ) -> Result<()> {
        CudaLinear::keep_many(spec, items).map_err(CoreError::Invalid)
    }
    fn keep_kv_many(&self, items: &mut [(&mut CudaKv, &[usize])]) -> Result<()> {
        CudaKv::keep_many(items).map_err(CoreError::Resource)
    }
    fn snapshot_linear(&self, st: &CudaLinear) -> CudaLinearSnapshot {
        st.snapshot()
    }
    fn restore_linear(&self, snap: &CudaLinearSnapshot) -> CudaLinear {
        CudaLinear::restore(self.dev.clone(), snap)
    }
    fn snapshot_kv(&self, st: &CudaKv) -> CudaKvSnapshot {
        st.snapshot()
    }
    fn restore_kv(&self, spec: &AttnSpec, snap: &CudaKvSnapshot) -> Result<CudaKv> {
        let mut kv = CudaKv::new(self.dev.clone(), self.pool.clone(), spec, self.kv_dtype);
        kv.restore(snap).map_err(CoreError::Resource)?;
        Ok(kv)
    }
    fn linear_snapshot_bytes(&self, snap: &CudaLinearSnapshot) -> usize {
        4 * snap.floats()
    }
    fn kv_snapshot_bytes(&self, snap: &CudaKvSnapshot) -> usize {
        snap.bytes()
    }
    fn kv_pages(&self) -> (usize, usize, usize) {
        (PAGE_ROWS, self.pool.capacity(), self.pool.in_use())
    }
    fn kv_dtype(&self) -> KvDtype {
        self.kv_dtype
    }

    fn embed(&self, table: &CudaMatrix, ids: &[u32]) -> CudaAct {
        ops::embed(&self.dev, table, ids)
    }
    fn rms_norm(&self, x: &CudaAct, w: &CudaVector, eps: f32) -> CudaAct {
        ops::rms_norm(&self.dev, x, w, eps)
    }
    fn project(&self, x: &CudaAct, w: &CudaMatrix) -> CudaAct {
        project::project(&self.dev, x, w)
    }
    fn project_many(&self, x: &CudaAct, ws: &[&CudaMatrix]) -> Vec<CudaAct> {
        project::project_many(&self.dev, x, ws)
    }
    fn add_assign(&self, x: &mut CudaAct, y: &CudaAct) {
        ops::add_assign(&self.dev, x, y)
    }
    fn add_rms_norm(&self, x: &mut CudaAct, y: &CudaAct, w: &CudaVector, eps: f32) -> CudaAct {
        ops::add_rms_norm(&self.dev, x, y, w, eps)
    }
    fn swiglu(&self, gate: &CudaAct, up: &CudaAct) -> CudaAct {
        ops::swiglu(&self.dev, gate, up)
    }
    fn select_rows(&self, x: &CudaAct, rows: &[usize]) -> CudaAct {
        ops::select_rows(&self.dev, x, rows)
    }
    fn gated_deltanet(
        &self,
        p: &LinearParams<Self>,
        mixed: &CudaAct,
        z: &CudaAct,
        b: &CudaAct,
        a: &CudaAct,
        rows: &[RowRef],
        states: &mut [&mut CudaLinear],
    ) -> CudaAct {
        deltanet::gated_deltanet(&self.dev, p, mixed, z, b, a, rows, states)
    }
    fn gated_attention(
        &self,
        p: &AttnParams<Self>,
        qg: &CudaAct,
        k: &CudaAct,
        v: &CudaAct,
        rows: &[RowRef],
        states: &mut [&mut CudaKv],
    ) -> CudaAct {
        attention::gated_attention(&self.dev, p, qg, k, v, rows, states)
    }
    fn to_host(&self, x: &CudaAct) -> Vec<f32> {
        self.dev.download(&x.buf, x.rows * x.cols)
    }
    fn act_shape(&self, x: &CudaAct) -> (usize, usize) {
        (x.rows, x.cols)
    }
    fn rows_to_host(&self, x: &CudaAct, first: usize, n: usize) -> Vec<f32> {
        assert!(
            first + n <= x.rows,
            "rows {first}..{} of {}",
            first + n,
            x.rows
        );
        self.dev.download_at(&x.buf, first * x.cols, n * x.cols)
    }
    fn draws_on_device(&self) -> bool {
        true
    }
    fn draw_rows(&self, logits: &CudaAct, draws: &[RowDraw], edits: &[LogitEdit]) -> Vec<u32> {
        sample::draw_edited_rows(&self.dev, logits, draws, edits)
    }
    fn row_tops(&self, logits: &CudaAct, asks: &[(usize, f64, usize)]) -> Vec<RowTop> {
        sample::row_tops(&self.dev, logits, asks)
    }
}
