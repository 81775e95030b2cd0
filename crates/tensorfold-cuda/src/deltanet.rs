//! Gated DeltaNet on the device: per slot the conv tail and the fp32 recurrent state; a round steps each row from
//! its parent's state (chains in place, tree branches from snapshots), and `keep` leaves the state after the last
//! kept row, replaying the kept path from the round's start state when the in-place state followed another branch.

use crate::device::{Arg, Dev};
use crate::ops::{new_act, CudaAct, Prepared};
use crate::round::{ancestry, round_rows};
use crate::scratch::Buf;
use cudarc::driver::CudaSlice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tensorfold_backend::{LinearParams, LinearSpec, RowRef};

/// Kernel limits (KMAX·32, and 16 rows per warp · DN_WARPS in deltanet.cu).
const MAX_KEY_DIM: usize = 128;
const MAX_VALUE_DIM: usize = 128;
const DN_THREADS: u32 = 256;
const DN_OCT_THREADS: u32 = 128;

/// What `keep` needs of a round: conv outputs, pre-conv inputs and the gate inputs of every row.
struct LinRound {
    x: Buf<f32>,
    mixed: Arc<Buf<f32>>,
    b: Arc<Buf<f32>>,
    a: Arc<Buf<f32>>,
    /// The layer's parameters (owned by the model, which outlives its rounds).
    params: KeepParams,
}

/// One DeltaNet layer's state for one slot.
pub struct CudaLinear {
    dev: Arc<Dev>,
    /// The last K−1 pre-conv inputs, oldest first: `[K−1, channels]`.
    tail: Buf<f32>,
    /// The buffer the next keep writes the new tail into (the two take turns, so a recorded round's graph
    /// nodes see the same two addresses every other round: graph.rs).
    spare_tail: Option<Buf<f32>>,
    /// `[value_heads, value_dim, key_dim]`.
    state: Buf<f32>,
    tail_len: usize,
    state_len: usize,
    /// The committed state at the round's start, when the round stepped `state` past it.
    start: Option<Buf<f32>>,
    /// The rows stepped in place (a chain), or `[usize::MAX]` when the round was not one chain.
    in_place: Vec<usize>,
    pending: Option<(Arc<LinRound>, Vec<usize>)>,
}

/// A committed DeltaNet state copied on the device (the prompt cache keeps its snapshots there). Taking one is two
/// device copies with no wait; the host copies it replaced waited on the stream and stalled every stream's round
/// (BENCHMARKS.md §7, call 133).
pub struct CudaLinearSnapshot {
    dev: Arc<Dev>,
    conv_tail: CudaSlice<f32>,
    recurrent: CudaSlice<f32>,
    tail_len: usize,
    state_len: usize,
}

impl Drop for CudaLinearSnapshot {
    fn drop(&mut self) {
        // The driver frees at once, ahead of recorded launches still unsent that read the copies: send them first.
        self.dev.send_recorded();
    }
}

impl CudaLinearSnapshot {
    /// Host copies of the conv tail and the recurrent state (the CPU backend's layouts), for the checks.
    pub fn host(&self) -> (Vec<f32>, Vec<f32>) {
        (
            self.dev.download(&self.conv_tail, self.tail_len),
            self.dev.download(&self.recurrent, self.state_len),
        )
    }

    /// f32 values held.
    pub fn floats(&self) -> usize {
        self.tail_len + self.state_len
    }
}

impl CudaLinear {
    pub(crate) fn new(dev: Arc<Dev>, spec: &LinearSpec) -> Self {
        let tail_len = spec.conv_kernel.saturating_sub(1) * spec.conv_channels();
        let state_len = spec.value_heads * spec.value_dim * spec.key_dim;
        CudaLinear {
            tail: dev.zeros_buf::<f32>(tail_len),
            spare_tail: None,
            state: dev.zeros_buf::<f32>(state_len),
            dev,
            tail_len,
            state_len,
            start: None,
            in_place: Vec::new(),
            pending: None,
        }
    }

    pub(crate) fn snapshot(&self) -> CudaLinearSnapshot {
        let committed = self.start.as_ref().unwrap_or(&self.state);
        let dev = &self.dev;
        let mut conv_tail = dev.alloc::<f32>(self.tail_len);
        let mut recurrent = dev.alloc::<f32>(self.state_len);
        dev.copy(&self.tail, &mut conv_tail, self.tail_len);
        dev.copy(committed, &mut recurrent, self.state_len);
        CudaLinearSnapshot {
            dev: dev.clone(),
            conv_tail,
            recurrent,
            tail_len: self.tail_len,
            state_len: self.state_len,
        }
    }

    pub(crate) fn restore(dev: Arc<Dev>, snap: &CudaLinearSnapshot) -> Self {
        let (tail_len, state_len) = (snap.tail_len, snap.state_len);
        let mut tail = dev.scratch::<f32>(tail_len);
        let mut state = dev.scratch::<f32>(state_len);
        dev.copy(&snap.conv_tail, &mut tail, tail_len);
        dev.copy(&snap.recurrent, &mut state, state_len);
        CudaLinear {
            dev,
            tail,
            spare_tail: None,
            state,
            tail_len,
            state_len,
            start: None,
            in_place: Vec::new(),
            pending: None,
        }
    }

    /// Commits the rows on each state's path (root first; states of any linear layers and slots): conv tail and
    /// recurrent state become those after the path's last row. The conv tails of all the states are written by
    /// one launch (a decode round paid one a slot a layer before: 768 for 16 streams on the 27B shape).
    pub(crate) fn keep_many(
        spec: &LinearSpec,
        items: &mut [(&mut CudaLinear, &[usize])],
    ) -> Result<(), String> {
        let Some(dev) = items.first().map(|(st, _)| st.dev.clone()) else {
            return Ok(());
        };
        let (c, k) = (spec.conv_channels(), spec.conv_kernel);
        crate::round::keep_round(
            &dev,
            items
                .iter()
                .map(|(st, path)| (st.pending.as_ref().map(|p| &p.0), path.len())),
        );
        // The tails' launch: (old tail, mixed input, new tail) of each state, its path and (path offset, length).
        let (mut old, mut mixed, mut new) = (Vec::new(), Vec::new(), Vec::new());
        let (mut paths, mut offs) = (Vec::new(), Vec::new());
        // The rounds stay alive until that launch is queued: a recycled buffer must not be reused before it.
        let mut held = Vec::new();
        for (st, path) in items.iter_mut() {
            let pending = st.pending.take();
            let start = st.start.take();
            let in_place = std::mem::take(&mut st.in_place);
            if path.is_empty() {
                if let Some(s) = start {
                    st.state = s;
                }
                continue;
            }
            let (round, rows) = pending.ok_or_else(|| format!("row {} is not pending", path[0]))?;
            crate::round::check_pending(&rows, path)?;
            let idx: Vec<i32> = path.iter().map(|&r| r as i32).collect();
            if k > 1 {
                let new_tail = st
                    .spare_tail
                    .take()
                    .unwrap_or_else(|| dev.scratch::<f32>(st.tail_len));
                old.push(dev.ptr(&st.tail));
                mixed.push(dev.ptr(&*round.mixed));
                new.push(dev.ptr(&new_tail));
                offs.extend([paths.len() as i32, path.len() as i32]);
                paths.extend_from_slice(&idx);
                st.spare_tail = Some(std::mem::replace(&mut st.tail, new_tail));
            }
            if in_place.as_slice() != *path {
                // The in-place state followed another branch (or more rows): replay the kept rows from the start.
                if let Some(s) = start {
                    st.state = s;
                }
                let list: Vec<i32> = idx.iter().flat_map(|&r| [r, -1, -1]).collect();
                let list = dev.stage_i32s(&list);
                let slot_off = dev.stage_i32s(&[0, path.len() as i32]);
                let ptrs = dev.stage_u64s(&[dev.ptr(&st.state), 0]);
                let base = dev.staged_ptr(&ptrs);
                recur(
                    &dev,
                    spec,
                    &round.params,
                    &round,
                    (0, 0),
                    (base, base + 8, 0),
                    (dev.staged_ptr(&list), dev.staged_ptr(&slot_off)),
                    (1, path.len()),
                    None,
                    recur_rows_per_warp(spec.value_dim),
                );
            }
            held.push(round);
        }
        if !old.is_empty() {
            let n = old.len();
            old.extend(mixed);
            old.extend(new);
            let ptrs = dev.stage_u64s(&old);
            let base = dev.staged_ptr(&ptrs);
            let (paths, offs) = (dev.stage_i32s(&paths), dev.stage_i32s(&offs));
            dev.launch(
                "dn_tail_keep",
                (c.div_ceil(256) as u32, (k - 1) as u32, n as u32),
                256,
                &[
                    Arg::P(base),
                    Arg::P(base + 8 * n as u64),
                    Arg::P(base + 16 * n as u64),
                    Arg::P(dev.staged_ptr(&paths)),
                    Arg::P(dev.staged_ptr(&offs)),
                    Arg::I(c as i32),
                    Arg::I(k as i32),
                ],
            );
        }
        drop(held);
        Ok(())
    }
}

/// The layer parameters the recurrence reads (device addresses).
#[derive(Clone, Copy)]
pub struct KeepParams {
    pub a_log: u64,
    pub dt_bias: u64,
    pub norm: u64,
    pub eps: f32,
}

impl KeepParams {
    pub(crate) fn of(dev: &Dev, p: &LinearParams<crate::CudaBackend>) -> Self {
        KeepParams {
            a_log: dev.ptr(&p.a_log.buf),
            dt_bias: dev.ptr(&p.dt_bias.buf),
            norm: dev.ptr(&p.norm.buf),
            eps: p.eps,
        }
    }
}

/// Value-dim rows per warp of dn_recur (a kernel per choice): 2 splits a 128-row head over 8 blocks, 16 keeps the
/// whole head in one block (`TENSORFOLD_CUDA_DN_SPLIT=0`, the layout before the split, for same-run comparisons).
/// Every choice gives every row the same arithmetic, so the same bits (the backend-ops test checks both).
pub(crate) fn recur_rows_per_warp(value_dim: usize) -> usize {
    static SPLIT: OnceLock<bool> = OnceLock::new();
    let split = *SPLIT
        .get_or_init(|| std::env::var("TENSORFOLD_CUDA_DN_SPLIT").map_or(true, |v| v != "0"))
        && !WHOLE_HEADS.load(Ordering::Relaxed);
    // TENSORFOLD_CUDA_DN_VM = 1, 2 or 16 picks the rows per warp (same-run comparisons; 1 gives a 128-row head 16
    // blocks).
    static VM: OnceLock<Option<usize>> = OnceLock::new();
    let forced = *VM.get_or_init(|| {
        crate::device::env_usize("TENSORFOLD_CUDA_DN_VM").filter(|v| matches!(v, 1 | 2 | 16))
    });
    // At most 8 blocks per head: 1 row per warp up to 64 rows, 2 up to 128 (MAX_VALUE_DIM).
    if let Some(vm) = forced.filter(|_| split) {
        vm
    } else if !split {
        16
    } else if value_dim <= 64 {
        1
    } else {
        2
    }
}

/// The recurrence kernel a round takes (its name's middle): chains (some slot steps more than one row: prompt chunks,
/// drafted rounds, replays) take `dn_recur_oct` (deltanet_octets.cu, see oct_chains), or with
/// `TENSORFOLD_CUDA_DN_OCT=0` `dn_recur_batch_v*` (deltanet_batch.cu: inputs staged and prepared 16 rows at a
/// time, no barrier between steps); `TENSORFOLD_CUDA_DN_BATCH=0` puts them on `dn_recur_ring_v*` (inputs staged one
/// row ahead, normalised once a block), and with `TENSORFOLD_CUDA_DN_RING=0` as well on the plain kernel. The
/// batched kernel replaced the ring in call 128 (the H200: 16- and 32-row 27B MLX4 rounds 1 to 2.5% faster, 16k
/// prefills 3% faster, a 2,048-row prompt chunk's chain launch 28% shorter). A round of one row a slot (decode)
/// keeps the plain kernel: staging pays off only along a chain. Every kernel gives each row the same arithmetic
/// (deltanet.cu dn_normalise and dn_update's sums, which the octet kernel splits over its lanes in the same tree), so
/// the bits are the same; the backend-ops test's switches put a round on the octet kernel, the batched one, the ring
/// or the plain one whatever the environment says.
fn recur_kind(slots: usize, entries: usize, vm: usize) -> &'static str {
    static RING: OnceLock<bool> = OnceLock::new();
    static BATCH: OnceLock<bool> = OnceLock::new();
    let ring =
        *RING.get_or_init(|| std::env::var("TENSORFOLD_CUDA_DN_RING").map_or(true, |v| v != "0"));
    let batch =
        *BATCH.get_or_init(|| std::env::var("TENSORFOLD_CUDA_DN_BATCH").map_or(true, |v| v != "0"));
    if entries <= slots || REGISTER_INPUTS.load(Ordering::Relaxed) {
        ""
    } else if BATCH_INPUTS.load(Ordering::Relaxed) {
        "batch_"
    } else if RING_INPUTS.load(Ordering::Relaxed) {
        "ring_"
    } else if OCT_INPUTS.load(Ordering::Relaxed) || (batch && vm != 16 && oct_chains()) {
        "oct_"
    } else if batch {
        "batch_"
    } else if ring {
        "ring_"
    } else {
        ""
    }
}

/// Whether the batched kernel steps chains with each row's output sum beside the next row's advance
/// (deltanet_batch.cu dn_chain_batch; write_out's bit 1): on unless `TENSORFOLD_CUDA_DN_PIPE=0`. The bits are the
/// same either way; the backend-ops test compares the batched kernel with the plain one on chains.
fn chain_pipe() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_DN_PIPE").map_or(true, |v| v != "0"))
}

/// Whether chains take `dn_recur_oct` (deltanet_octets.cu: the batched kernel with a state row on eight lanes, the
/// same sums in the same tree, 3 shuffles a sum for four rows): on unless `TENSORFOLD_CUDA_DN_OCT=0`, which keeps
/// `dn_recur_batch_v*` for same-run comparisons. One block a head (vm 16: `TENSORFOLD_CUDA_DN_SPLIT=0`) keeps the
/// batched kernel. Call 168 (an H100, alternating): 27B bf16 prefills 1.9% faster at 16k and 2.4% at 2k, 27B MLX4
/// 16-row rounds unchanged (11.51 to 11.62 ms on octets, 11.58 and 11.59 batched).
fn oct_chains() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_CUDA_DN_OCT").map_or(true, |v| v != "0"))
}

/// Set by the backend-ops test to run the octet kernel whatever the environment says.
pub(crate) static OCT_INPUTS: AtomicBool = AtomicBool::new(false);

/// Set by the backend-ops test to run dn_recur with its inputs in registers beside the staged one.
pub(crate) static REGISTER_INPUTS: AtomicBool = AtomicBool::new(false);

/// Set by the backend-ops test to run the batched kernel beside the ring.
pub(crate) static BATCH_INPUTS: AtomicBool = AtomicBool::new(false);

/// Set by the backend-ops test to run the ring (inputs staged one row ahead) beside the batched kernel.
pub(crate) static RING_INPUTS: AtomicBool = AtomicBool::new(false);

/// Set by the backend-ops test to run the whole-head layout beside the split one in one process.
pub(crate) static WHOLE_HEADS: AtomicBool = AtomicBool::new(false);

/// Launches dn_recur over `slots` × value heads × parts blocks (`slots_entries`: slots, and list entries in all):
/// (z, out), (states, starts, snaps), (list, slot_off); then, when `write_out`, dn_norm over `rows` rows (their
/// gated norm, in place in out, and its tensor-core form into `prep`).
#[allow(clippy::too_many_arguments)]
fn recur(
    dev: &Dev,
    s: &LinearSpec,
    p: &KeepParams,
    round: &LinRound,
    z_out: (u64, u64),
    st: (u64, u64, u64),
    list: (u64, u64),
    slots_entries: (usize, usize),
    write_out: Option<(usize, Option<&Prepared>)>,
    vm: usize,
) {
    let (slots, entries) = slots_entries;
    let kind = recur_kind(slots, entries, vm);
    // The octet kernel: 16 value rows a block of 128 threads, whatever vm says.
    let (name, rows_a_block, threads) = if kind == "oct_" {
        ("dn_recur_oct".to_string(), 16, DN_OCT_THREADS)
    } else {
        (
            format!("dn_recur_{kind}v{vm}"),
            DN_THREADS as usize / 32 * vm,
            DN_THREADS,
        )
    };
    let parts = s.value_dim.div_ceil(rows_a_block);
    dev.launch(
        &name,
        ((s.value_heads * parts) as u32, slots as u32, 1),
        threads,
        &[
            Arg::P(dev.ptr(&round.x)),
            Arg::P(dev.ptr(&*round.b)),
            Arg::P(dev.ptr(&*round.a)),
            Arg::P(z_out.1),
            Arg::P(p.a_log),
            Arg::P(p.dt_bias),
            Arg::P(st.0),
            Arg::P(st.1),
            Arg::P(st.2),
            Arg::P(list.0),
            Arg::P(list.1),
            Arg::I(s.key_heads as i32),
            Arg::I(s.value_heads as i32),
            Arg::I(s.key_dim as i32),
            Arg::I(s.value_dim as i32),
            Arg::I(
                write_out.is_some() as i32
                    | if kind == "batch_" && chain_pipe() {
                        2
                    } else {
                        0
                    },
            ),
        ],
    );
    if let Some((rows, prep)) = write_out {
        let mut args = vec![Arg::P(z_out.1), Arg::P(z_out.0), Arg::P(p.norm)];
        args.extend(crate::ops::prepared_args(dev, prep));
        args.extend([
            Arg::I(s.value_heads as i32),
            Arg::I(s.value_dim as i32),
            Arg::F(p.eps),
            Arg::I(prep.is_some() as i32),
        ]);
        dev.launch(
            "dn_norm",
            (rows as u32, s.value_heads as u32, 1),
            DN_THREADS,
            &args,
        );
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn gated_deltanet(
    dev: &Dev,
    p: &LinearParams<crate::CudaBackend>,
    mixed: &CudaAct,
    z: &CudaAct,
    b: &CudaAct,
    a: &CudaAct,
    rows: &[RowRef],
    states: &mut [&mut CudaLinear],
) -> CudaAct {
    let s = p.spec;
    assert!(
        s.key_dim <= MAX_KEY_DIM && s.value_dim <= MAX_VALUE_DIM,
        "DeltaNet head dims {}×{}: the CUDA kernels hold at most {MAX_KEY_DIM}×{MAX_VALUE_DIM}",
        s.key_dim,
        s.value_dim
    );
    assert!(
        s.key_heads > 0 && s.value_heads.is_multiple_of(s.key_heads),
        "value heads must be a multiple of key heads"
    );
    let (c, k) = (s.conv_channels(), s.conv_kernel);
    let vt = s.value_heads * s.value_dim;
    assert_eq!(
        (mixed.cols, z.cols, b.cols, a.cols),
        (c, vt, s.value_heads, s.value_heads),
        "DeltaNet input columns"
    );
    let r = rows.len();
    let out = new_act(dev, r, vt);
    for st in states.iter_mut() {
        st.pending = None;
        st.in_place.clear();
        st.start = None;
    }
    if r == 0 {
        return out;
    }
    // 1. Conv + SiLU per row over (committed tail + ancestors + itself).
    let t = round_rows(rows, &vec![0; states.len()]);
    let (meta, paths) = (dev.stage_i32s(&t.meta), dev.stage_i32s(&t.paths));
    let tails: Vec<u64> = states.iter().map(|st| dev.ptr(&st.tail)).collect();
    let tails = dev.stage_u64s(&tails);
    let x = dev.scratch::<f32>(r * c);
    dev.launch(
        "dn_conv",
        (c.div_ceil(256) as u32, r as u32, 1),
        256,
        &[
            Arg::P(dev.ptr(&mixed.buf)),
            Arg::P(dev.ptr(&p.conv.buf)),
            Arg::P(dev.ptr(&x)),
            Arg::P(dev.staged_ptr(&tails)),
            Arg::P(dev.staged_ptr(&meta)),
            Arg::P(dev.staged_ptr(&paths)),
            Arg::I(c as i32),
            Arg::I(k as i32),
        ],
    );
    // 2. Per active slot: entries (row, restore, save); a row branching off anything but the previous row
    //    restores its parent's snapshot (or the round's start state).
    let mut by_slot: Vec<Vec<usize>> = vec![Vec::new(); states.len()];
    for (i, row) in rows.iter().enumerate() {
        by_slot[row.slot].push(i);
    }
    let (mut list, mut slot_off, mut active) = (Vec::new(), vec![0i32], Vec::new());
    let mut snaps = 0i32;
    // local[i]: row i's index among its slot's rows.
    let mut local = vec![usize::MAX; r];
    for (slot, idxs) in by_slot.iter().enumerate() {
        if idxs.is_empty() {
            continue;
        }
        let st = &mut *states[slot];
        if idxs.len() > 1 {
            // A copy through `Dev::copy`, which keeps its place among a recorded round's launches.
            let mut start = dev.scratch::<f32>(st.state_len);
            dev.copy(&st.state, &mut start, st.state_len);
            st.start = Some(start);
        }
        let mut entries: Vec<[i32; 3]> = idxs.iter().map(|&i| [i as i32, -1, -1]).collect();
        for (n, &i) in idxs.iter().enumerate() {
            local[i] = n;
        }
        for (n, &i) in idxs.iter().enumerate() {
            let parent_local = rows[i]
                .parent
                .map(|pr| local[pr])
                .filter(|&pl| pl != usize::MAX);
            let prev = n.checked_sub(1);
            if parent_local != prev {
                entries[n][1] = match parent_local {
                    None => -2,
                    Some(pl) => {
                        if entries[pl][2] < 0 {
                            entries[pl][2] = snaps;
                            snaps += 1;
                        }
                        entries[pl][2]
                    }
                };
            }
        }
        list.extend(entries.iter().flatten());
        slot_off.push((list.len() / 3) as i32);
        active.push(slot);
        let chain = ancestry(rows, *idxs.last().unwrap_or(&0));
        st.in_place = if chain == *idxs {
            chain
        } else {
            vec![usize::MAX]
        };
    }
    let head_state = s.value_dim * s.key_dim;
    let snap_buf = dev.scratch::<f32>(snaps.max(0) as usize * s.value_heads * head_state);
    let mut ptrs: Vec<u64> = active
        .iter()
        .map(|&sl| dev.ptr(&states[sl].state))
        .collect();
    ptrs.extend(
        active
            .iter()
            .map(|&sl| states[sl].start.as_ref().map_or(0, |b| dev.ptr(b))),
    );
    let ptrs = dev.stage_u64s(&ptrs);
    let base = dev.staged_ptr(&ptrs);
    let (list, slot_off) = (dev.stage_i32s(&list), dev.stage_i32s(&slot_off));
    let round = Arc::new(LinRound {
        x,
        mixed: mixed.buf.clone(),
        b: b.buf.clone(),
        a: a.buf.clone(),
        params: KeepParams::of(dev, p),
    });
    // The out projection reads the tensor-core form dn_norm writes (no prepare_x launch).
    let prep = (crate::project::fuse_prepare(vt) && s.value_dim.is_multiple_of(32))
        .then(|| crate::project::alloc_prepared(dev, r, vt));
    recur(
        dev,
        &s,
        &round.params,
        &round,
        (dev.ptr(&z.buf), dev.ptr(&out.buf)),
        (base, base + 8 * active.len() as u64, dev.ptr(&snap_buf)),
        (dev.staged_ptr(&list), dev.staged_ptr(&slot_off)),
        (active.len(), r),
        Some((r, prep.as_ref())),
        recur_rows_per_warp(s.value_dim),
    );
    if let Some(p) = prep {
        let _ = out.prepared.set(p);
    }
    for (slot, idxs) in by_slot.into_iter().enumerate() {
        if !idxs.is_empty() {
            states[slot].pending = Some((round.clone(), idxs));
        }
    }
    out
}
