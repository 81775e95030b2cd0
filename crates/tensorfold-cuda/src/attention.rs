//! Gated attention on the device: KV rows in 16-position pages taken from a shared pool, the round's keys and
//! values pending until `keep` appends the accepted path, and the attention op over committed keys + ancestors.

use crate::device::{Arg, Dev};
use crate::ops::{new_act, CudaAct};
use crate::round::round_rows;
use crate::scratch::Buf;
use cudarc::driver::CudaSlice;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tensorfold_backend::{AttnParams, AttnSpec, KvDtype, RowRef};

/// Positions per page (PAGE in attention.cu).
pub const PAGE_ROWS: usize = 16;
/// Consecutive key dimensions a page stores together (KG in attention.cu): keys are `[row / KEY_GROUP][PAGE_ROWS]
/// [KEY_GROUP]`, so a lane loads a group of its key's dimensions at once.
pub(crate) const KEY_GROUP: usize = 4;

/// 32-bit words of one KV page for attention rows of `row` elements stored as `dtype`: its keys by dimension (in
/// groups of KEY_GROUP), then its values (bf16 pages hold two elements a word; `row` is even, head_dim being a multiple of 4).
pub(crate) fn page_words(row: usize, dtype: KvDtype) -> usize {
    2 * PAGE_ROWS * row * dtype.bytes() / 4
}

/// The name of a kernel that reads or writes KV pages, for pages of `dtype` (attention.cu: `_kvbf16` kernels
/// take bf16 pages).
fn kv_kernel(name: &str, dtype: KvDtype) -> String {
    match dtype {
        KvDtype::F32 => name.to_string(),
        KvDtype::Bf16 => format!("{name}_kvbf16"),
    }
}

/// Largest head_dim the kernels hold (HDMAX); heads per block of attn_prep (AW).
const HDMAX: usize = 256;
const AW: usize = 1;
/// Positions per chunk block (ACH) and its warps (AWARPS) in attention.cu.
const CHUNK: usize = 256;
const CHUNK_WARPS: usize = 8;
/// Most floats of chunk partials one attention launch writes (256 MiB), so long prefills run in slices of rows.
const PART_FLOATS: usize = 1 << 26;

/// Query heads of one kv head that an attention block takes together (attn_chunk_g1/2/3/6), loading each key and
/// value once for all of them. Every choice gives each head the same arithmetic, so the same bits. Grouping pays
/// for rows of more than one chunk of keys when the launch still has blocks for every SM (264 = two per SM of the
/// H200): on the H200 (call 17) it took 16k-token prefill from 476 to 755 tok/s and decode at 16k of context from
/// 62 to 70 tok/s, but slowed 64 rows of 64 keys by 8%, so rows of one chunk keep one head per block. Six heads a
/// block where six divide a kv head's (the 27B's 24 over 4): its keys and values are then read once a kv head, not
/// twice, and one-stream decode on the H200 ran 5% faster at 32k of context and 2.5% at 16k than with three (call
/// 151). `TENSORFOLD_CUDA_ATTN_GROUP=0` keeps one head per block always, `=3` at most three (for same-run
/// comparisons).
fn heads_per_block(heads: usize, kvh: usize, rows: usize, chunks: usize) -> usize {
    static MODE: OnceLock<Option<String>> = OnceLock::new();
    let mode = MODE.get_or_init(|| std::env::var("TENSORFOLD_CUDA_ATTN_GROUP").ok());
    let on = mode.as_deref() != Some("0");
    let per_kv = heads / kvh;
    let g = if per_kv.is_multiple_of(3) {
        3
    } else if per_kv.is_multiple_of(2) {
        2
    } else {
        1
    };
    let six = if per_kv.is_multiple_of(6) { 6 } else { g };
    let widest = if mode.as_deref() == Some("3") { g } else { six };
    match GROUPING.load(Ordering::Relaxed) {
        1 => 1,
        2 => g,
        3 => six,
        _ if on && chunks > 1 && heads / g * rows * chunks >= 264 => widest,
        _ => 1,
    }
}

/// Set by the backend-ops test: 0 = by the launch's size (above), 1 = one head per block, 2 = grouped always, 3 =
/// six heads a block always (where six divide).
pub(crate) static GROUPING: AtomicU8 = AtomicU8::new(0);

/// Bytes of attn_chunk's dynamic shared memory for `group` heads a block (attention.cu attn_chunk_heads): none up
/// to 3 (static), else the queries, tile maxima and sums, and tile value sums.
fn chunk_smem(group: usize) -> u32 {
    if group <= 3 {
        0
    } else {
        (4 * group * (HDMAX + 2 * (CHUNK / 32) + (CHUNK / 32) * HDMAX)) as u32
    }
}

/// Head dims the shared-key kernel (`attn_block_d*`, attention_block.cu) is built for.
pub(crate) const BLOCK_HEAD_DIMS: [usize; 4] = [32, 64, 128, 256];
/// Threads of an attn_block block (BT).
const BLOCK_THREADS: u32 = 256;
/// Rows a chain needs before it takes attn_block: a 16-row chain at a short context has too few blocks for it (27B
/// MLX4 16-row rounds 14.3 ms with attn_chunk against 14.9, call 74), a 2,048-row prompt chunk gains (see
/// BENCHMARKS.md). `TENSORFOLD_CUDA_ATTN_BLOCK_ROWS` sets another count, for timing runs.
fn block_min_rows() -> usize {
    static ROWS: OnceLock<usize> = OnceLock::new();
    *ROWS.get_or_init(|| crate::device::env_usize("TENSORFOLD_CUDA_ATTN_BLOCK_ROWS").unwrap_or(128))
}

/// Set by the backend-ops test: 0 = attn_block for chains of block_min_rows() rows or more, in the shape the
/// environment names (below), 1 = never, and for every chain (one row included): 2 = two keys a thread
/// (attn_block_d*_q3), 3 = four (attn_block_d*_q3k4), 4 = a chain of eight a lane (attn_block_d*_q3k8).
pub(crate) static BLOCK_MODE: AtomicU8 = AtomicU8::new(0);

/// How attn_block runs (attention_block.cu): `qt` (2 or 3) columns a thread, 16·qt a block, and `keys` (2, 4 or 8)
/// keys a thread scores (4: two tiles of keys at a time, attn_block_d*_q3k4, only with qt 3; 8: two tiles, one of
/// a score's four chains a lane and 6 columns a warp, attn_block_d*_q3k8, attention_lanes.cu). Every shape gives
/// every score and sum the same bits; the choice is timing only.
#[derive(Clone, Copy, PartialEq, Debug)]
struct BlockShape {
    qt: usize,
    keys: usize,
}

impl BlockShape {
    const Q3: Self = Self { qt: 3, keys: 2 };
    const Q3K4: Self = Self { qt: 3, keys: 4 };
    const Q3K8: Self = Self { qt: 3, keys: 8 };

    fn kernel(self, hd: usize) -> String {
        match self.keys {
            4 | 8 => format!("attn_block_d{hd}_q{}k{}", self.qt, self.keys),
            _ => format!("attn_block_d{hd}_q{}", self.qt),
        }
    }

    /// Bytes of attn_block's dynamic shared memory (BlockSmem in attention_block.cu): the queries, the scores of
    /// every tile of a chunk, the keys of the tiles scored at a time, and per-tile statistics.
    fn smem(self, hd: usize) -> usize {
        let (cols, tiles) = (16 * self.qt, CHUNK / 32);
        let keys = if self.keys == 2 { 32 } else { 64 };
        4 * (cols * hd + tiles * cols * 32 + keys * hd + 3 * tiles * cols + 2 * cols)
    }
}

/// The shape of the shared-key kernel for this round, or None for attn_chunk. It takes rounds whose rows are all
/// one chain of one slot (a prompt chunk, one stream's drafted chain): the key at each position is then the same
/// for every row, so a block loads it once for up to 48 (row, head) columns. Its bits are attn_chunk's, so this
/// choice is timing only. `TENSORFOLD_CUDA_ATTN_BLOCK` = 0 (never), 2 (32 columns a block, two blocks an SM), 3
/// (48 columns, one block an SM, 2 keys a thread), 3k4 (48 columns, 4 keys a thread; 2% faster 16k and 3% faster
/// 32k 27B prefills than 3 on the H200, call 151) or 3k8 (the default: 48 columns, a chain a lane; 3% faster 16k
/// and 4% faster 32k 27B prefills than 3k4 on an H100, call 154).
fn block_kernel(
    dev: &Dev,
    meta: &[i32],
    heads: usize,
    kvh: usize,
    hd: usize,
) -> Option<BlockShape> {
    static SHAPE: OnceLock<Option<BlockShape>> = OnceLock::new();
    let chosen =
        *SHAPE.get_or_init(
            || match std::env::var("TENSORFOLD_CUDA_ATTN_BLOCK").as_deref() {
                Ok("0") => None,
                Ok("2") => Some(BlockShape { qt: 2, keys: 2 }),
                Ok("3") => Some(BlockShape::Q3),
                Ok("3k4") => Some(BlockShape::Q3K4),
                _ => Some(BlockShape::Q3K8),
            },
        );
    let rows = meta.len() / 5;
    let (shape, min_rows) = match BLOCK_MODE.load(Ordering::Relaxed) {
        1 => return None,
        2 => (BlockShape::Q3, 1),
        3 => (BlockShape::Q3K4, 1),
        4 => (BlockShape::Q3K8, 1),
        _ => (chosen?, block_min_rows()),
    };
    let one_chain = meta[3] < 0
        && meta
            .chunks_exact(5)
            .all(|m| m[0] == meta[0] && m[2] == meta[2] && m[3] == meta[3]);
    (rows >= min_rows
        && one_chain
        && BLOCK_HEAD_DIMS.contains(&hd)
        && heads / kvh <= 16 * shape.qt
        && shape.smem(hd) <= dev.max_dynamic_smem())
    .then_some(shape)
}

/// Pages of `page_words` 32-bit words (keys by dimension in groups of KEY_GROUP, then values by position, f32 or
/// bf16), at most `capacity` taken at once. The capacity may be set once the weights are on the device and the free
/// memory is known (serve).
pub struct KvPool {
    capacity: AtomicUsize,
    inner: Mutex<(usize, Vec<CudaSlice<f32>>)>,
}

impl KvPool {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(KvPool {
            capacity: AtomicUsize::new(capacity),
            inner: Mutex::new((0, Vec::new())),
        })
    }
    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }
    pub fn set_capacity(&self, pages: usize) {
        self.capacity.store(pages, Ordering::Relaxed)
    }
    /// Pages given back and kept for reuse: allocated device memory that holds no stream's keys.
    pub fn cached(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).1.len()
    }
    pub fn in_use(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0
    }
    fn take(&self, dev: &Dev, floats: usize) -> Option<CudaSlice<f32>> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 >= self.capacity() {
            return None;
        }
        g.0 += 1;
        match g.1.iter().position(|p| p.len() == floats) {
            Some(i) => Some(g.1.swap_remove(i)),
            None => Some(dev.alloc::<f32>(floats)),
        }
    }
    fn give_back(&self, page: CudaSlice<f32>) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = g.0.saturating_sub(1);
        if g.1.len() < 1024 {
            g.1.push(page);
        }
    }
}

#[path = "attention_snapshot.rs"]
mod snapshot;
pub use snapshot::CudaKvSnapshot;

/// The round's normed, rotated keys (by dimension: `[row][rows]`; pages group 4 dimensions) and its values
/// (`[rows, row]`), shared by the slots of the call.
struct KvRound {
    k: Buf<f32>,
    v: Arc<Buf<f32>>,
    rows: usize,
}

/// Keys and values of one attention layer for one slot.
pub struct CudaKv {
    dev: Arc<Dev>,
    pool: Arc<KvPool>,
    pages: Vec<CudaSlice<f32>>,
    /// Device array of the pages' addresses with room for `table_cap` (None while there are no pages). Kernels
    /// write it (copy_words), so a page taken inside a recorded round keeps its place among the launches.
    table: Option<Buf<u64>>,
    table_cap: usize,
    len: usize,
    row: usize,
    dtype: KvDtype,
    pending: Option<(Arc<KvRound>, Vec<usize>)>,
}

impl Drop for CudaKv {
    fn drop(&mut self) {
        // A page the pool does not keep is freed to the driver, which would run the free before any recorded
        // launch still unsent that writes it (the round's kv_keep): send those first.
        self.dev.send_recorded();
        for p in self.pages.drain(..) {
            self.pool.give_back(p);
        }
    }
}

impl CudaKv {
    pub(crate) fn new(dev: Arc<Dev>, pool: Arc<KvPool>, spec: &AttnSpec, dtype: KvDtype) -> Self {
        CudaKv {
            dev,
            pool,
            pages: Vec::new(),
            table: None,
            table_cap: 0,
            len: 0,
            row: spec.kv_heads * spec.head_dim,
            dtype,
            pending: None,
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn page_words(&self) -> usize {
        page_words(self.row, self.dtype)
    }
    fn table_ptr(&self) -> u64 {
        self.table.as_ref().map_or(0, |t| self.dev.ptr(t))
    }

    /// Takes pages until `rows` positions fit, then refreshes the device page table.
    fn reserve(&mut self, rows: usize) -> Result<(), String> {
        let before = self.pages.len();
        while self.pages.len() * PAGE_ROWS < rows {
            let page = self
                .pool
                .take(&self.dev, self.page_words())
                .ok_or_else(|| {
                    format!(
                        "KV page pool exhausted ({} pages in use)",
                        self.pool.capacity()
                    )
                })?;
            self.pages.push(page);
        }
        let n = self.pages.len();
        if n > before {
            let dev = &self.dev;
            if n > self.table_cap {
                let cap = n.next_power_of_two().max(16);
                let fresh = dev.scratch::<u64>(cap);
                if let Some(old) = &self.table {
                    dev.copy_words(dev.ptr(old), dev.ptr(&fresh), 2 * before);
                }
                self.table = Some(fresh);
                self.table_cap = cap;
            }
            let ptrs: Vec<u64> = self.pages[before..].iter().map(|p| dev.ptr(p)).collect();
            let staged = dev.stage(&ptrs);
            dev.copy_words(
                dev.staged_ptr(&staged),
                self.table_ptr() + 8 * before as u64,
                2 * (n - before),
            );
        }
        Ok(())
    }

    /// Commits the pending rows on each state's path (round rows, in position order) and drops the others: one
    /// launch for all the states, of every slot and every attention layer of the round (a decode round of 16
    /// streams on the 27B shape paid 256 launches before, one a slot a layer).
    pub(crate) fn keep_many(items: &mut [(&mut CudaKv, &[usize])]) -> Result<(), String> {
        let Some(dev) = items.first().map(|(st, _)| st.dev.clone()) else {
            return Ok(());
        };
        crate::round::keep_round(
            &dev,
            items
                .iter()
                .map(|(st, path)| (st.pending.as_ref().map(|p| &p.0), path.len())),
        );
        // Per state: its round's keys, values and table (pointer arrays), its path, and (path offset, path length,
        // position of its first kept row, the round's rows).
        let (mut keys, mut values, mut tables) = (Vec::new(), Vec::new(), Vec::new());
        let (mut paths, mut offs) = (Vec::new(), Vec::new());
        // The rounds stay alive until the launch is queued.
        let mut rounds: Vec<Arc<KvRound>> = Vec::new();
        let (mut row, mut longest, mut dtype) = (0, 0, KvDtype::F32);
        for (st, path) in items.iter_mut() {
            let pending = st.pending.take();
            if path.is_empty() {
                continue;
            }
            let (round, rows) = pending.ok_or_else(|| format!("row {} is not pending", path[0]))?;
            crate::round::check_pending(&rows, path)?;
            st.reserve(st.len + path.len())?;
            assert!(
                row == 0 || row == st.row,
                "kv_keep: states of one row width"
            );
            row = st.row;
            dtype = st.dtype;
            longest = longest.max(path.len());
            keys.push(dev.ptr(&round.k));
            values.push(dev.ptr(&*round.v));
            tables.push(st.table_ptr());
            offs.extend([
                paths.len() as i32,
                path.len() as i32,
                st.len as i32,
                round.rows as i32,
            ]);
            paths.extend(path.iter().map(|&r| r as i32));
            st.len += path.len();
            rounds.push(round);
        }
        let n = keys.len();
        if n == 0 {
            return Ok(());
        }
        let mut ptrs = keys;
        ptrs.extend(values);
        ptrs.extend(tables);
        let ptrs = dev.stage_u64s(&ptrs);
        let base = dev.staged_ptr(&ptrs);
        let (paths, offs) = (dev.stage_i32s(&paths), dev.stage_i32s(&offs));
        dev.launch(
            &kv_kernel("kv_keep", dtype),
            (longest as u32, n as u32, 1),
            256,
            &[
                Arg::P(base),
                Arg::P(base + 8 * n as u64),
                Arg::P(base + 16 * n as u64),
                Arg::P(dev.staged_ptr(&paths)),
                Arg::P(dev.staged_ptr(&offs)),
                Arg::I(row as i32),
            ],
        );
        drop(rounds);
        Ok(())
    }
}

pub(crate) fn gated_attention(
    dev: &Dev,
    p: &AttnParams<crate::CudaBackend>,
    qg: &CudaAct,
    k: &CudaAct,
    v: &CudaAct,
    rows: &[RowRef],
    states: &mut [&mut CudaKv],
) -> CudaAct {
    let s = p.spec;
    let (hd, heads, kvh) = (s.head_dim, s.heads, s.kv_heads);
    assert!(
        hd <= HDMAX && hd % 4 == 0,
        "head_dim {hd}: the CUDA kernels need a multiple of 4 up to {HDMAX}"
    );
    assert!(
        kvh > 0 && heads % kvh == 0,
        "heads {heads} not a multiple of kv heads {kvh}"
    );
    assert_eq!(qg.cols, heads * 2 * hd, "attention: query+gate columns");
    assert_eq!(
        (k.cols, v.cols),
        (kvh * hd, kvh * hd),
        "attention: key/value columns"
    );
    for st in states.iter_mut() {
        st.pending = None;
    }
    // Every state of a backend has its dtype; a call without states reads no pages.
    let dtype = states.first().map_or(KvDtype::F32, |st| st.dtype);
    assert!(
        states.iter().all(|st| st.dtype == dtype),
        "attention: KV states of one dtype"
    );
    let r = rows.len();
    let out = new_act(dev, r, heads * hd);
    if r == 0 {
        return out;
    }
    let committed: Vec<usize> = states.iter().map(|st| st.len).collect();
    let t = round_rows(rows, &committed);
    let staged = (dev.stage_i32s(&t.meta), dev.stage_i32s(&t.paths));
    let (meta, paths) = (dev.staged_ptr(&staged.0), dev.staged_ptr(&staged.1));
    let kround = dev.scratch::<f32>(r * kvh * hd);
    let qround = dev.scratch::<f32>(r * heads * hd);
    let theta = s.rope_theta;
    dev.launch(
        "attn_prep",
        ((kvh + heads).div_ceil(AW) as u32, r as u32, 1),
        (AW * 32) as u32,
        &[
            Arg::P(dev.ptr(&k.buf)),
            Arg::P(dev.ptr(&kround)),
            Arg::P(dev.ptr(&p.k_norm.buf)),
            Arg::P(dev.ptr(&qg.buf)),
            Arg::P(dev.ptr(&qround)),
            Arg::P(dev.ptr(&p.q_norm.buf)),
            Arg::P(meta),
            Arg::I(kvh as i32),
            Arg::I(heads as i32),
            Arg::I(hd as i32),
            Arg::I(s.rotary_dim as i32),
            Arg::D(theta),
            Arg::F(p.eps),
            Arg::I((dtype == KvDtype::Bf16) as i32),
        ],
    );
    let tables: Vec<u64> = states.iter().map(|st| st.table_ptr()).collect();
    let tables_staged = dev.stage_u64s(&tables);
    let tables = dev.staged_ptr(&tables_staged);
    // Chunks of the row with the most keys; rows of one chunk are finished by attn_chunk itself.
    let nch = (0..r)
        .map(|i| (t.meta[5 * i + 2] + t.meta[5 * i + 4]).max(1) as usize)
        .max()
        .unwrap_or(1)
        .div_ceil(CHUNK);
    // Partials of many-chunk rows, a slice of rows at a time so the scratch stays bounded in long prefills.
    let per_row = heads * nch * (hd + 2);
    let block = block_kernel(dev, &t.meta, heads, kvh, hd);
    // attn_block's blocks take rows_per_block rows each, so its slices are whole blocks (a slice of 169 rows left a
    // block of one row in each).
    let rows_per_block = block.map_or(1, |b| 16 * b.qt / (heads / kvh));
    let slice = if nch > 1 {
        let rows = (PART_FLOATS / per_row).clamp(1, r);
        if rows >= rows_per_block {
            rows / rows_per_block * rows_per_block
        } else {
            rows
        }
    } else {
        r
    };
    let part = (nch > 1).then(|| dev.scratch::<f32>(slice * per_row));
    let part_ptr = part.as_ref().map_or(0, |b| dev.ptr(b));
    // attn_merge's thread d takes dimension d (and at most 32 warps share its row max).
    let merge_threads = (hd.div_ceil(32) * 32) as u32;
    debug_assert!(merge_threads as usize >= hd && merge_threads <= 1024);
    let group = heads_per_block(heads, kvh, r, nch);
    for row0 in (0..r).step_by(slice) {
        let rows_here = slice.min(r - row0) as u32;
        if let Some(b) = block {
            dev.launch_smem(
                &kv_kernel(&b.kernel(hd), dtype),
                None,
                (
                    kvh as u32,
                    rows_here.div_ceil(rows_per_block as u32),
                    nch as u32,
                ),
                BLOCK_THREADS,
                b.smem(hd) as u32,
                &[
                    Arg::P(dev.ptr(&qround)),
                    Arg::P(dev.ptr(&qg.buf)),
                    Arg::P(dev.ptr(&kround)),
                    Arg::P(dev.ptr(&v.buf)),
                    Arg::P(dev.ptr(&out.buf)),
                    Arg::P(part_ptr),
                    Arg::P(tables),
                    Arg::P(meta),
                    Arg::P(paths),
                    Arg::I(heads as i32),
                    Arg::I(kvh as i32),
                    Arg::I(row0 as i32),
                    Arg::I(row0 as i32 + rows_here as i32),
                    Arg::I(nch as i32),
                    Arg::I(r as i32),
                ],
            );
        } else {
            dev.launch_smem(
                &kv_kernel(&format!("attn_chunk_g{group}"), dtype),
                None,
                ((heads / group) as u32, rows_here, nch as u32),
                (CHUNK_WARPS * 32) as u32,
                chunk_smem(group),
                &[
                    Arg::P(dev.ptr(&qround)),
                    Arg::P(dev.ptr(&qg.buf)),
                    Arg::P(dev.ptr(&kround)),
                    Arg::P(dev.ptr(&v.buf)),
                    Arg::P(dev.ptr(&out.buf)),
                    Arg::P(part_ptr),
                    Arg::P(tables),
                    Arg::P(meta),
                    Arg::P(paths),
                    Arg::I(heads as i32),
                    Arg::I(kvh as i32),
                    Arg::I(hd as i32),
                    Arg::I(row0 as i32),
                    Arg::I(nch as i32),
                    Arg::I(r as i32),
                ],
            );
        }
        if nch > 1 {
            dev.launch(
                "attn_merge",
                (heads as u32, rows_here, 1),
                merge_threads,
                &[
                    Arg::P(dev.ptr(&qg.buf)),
                    Arg::P(part_ptr),
                    Arg::P(dev.ptr(&out.buf)),
                    Arg::P(meta),
                    Arg::I(heads as i32),
                    Arg::I(hd as i32),
                    Arg::I(row0 as i32),
                    Arg::I(nch as i32),
                ],
            );
        }
    }
    let round = Arc::new(KvRound {
        k: kround,
        v: v.buf.clone(),
        rows: r,
    });
    let mut by_slot: Vec<Vec<usize>> = vec![Vec::new(); states.len()];
    for (i, row) in rows.iter().enumerate() {
        by_slot[row.slot].push(i);
    }
    for (st, idxs) in states.iter_mut().zip(by_slot) {
        if !idxs.is_empty() {
            st.pending = Some((round.clone(), idxs));
        }
    }
    out
}
