//! Gated DeltaNet on the CPU over a round: causal depthwise conv (window = committed tail + the row's ancestors),
//! SiLU, q/k L2 norm, beta and decay gates, the fp32 delta rule stepped from each row's parent state, and the
//! gated RMSNorm (qwen35.md §3.3). `keep` leaves the state after the last kept row, replaying if needed.

use super::attention::ancestry;
use super::kernels::{delta_rule_f32, dot_f32, DeltaStep};
use super::{inv_rms, sigmoid, silu, CpuAct, CpuBackend};
use crate::{LinearParams, LinearSpec, RowRef};
use rayon::prelude::*;

/// What `keep` needs of one pending row: its pre-conv input and its recurrence inputs.
#[derive(Clone, Debug, PartialEq)]
struct PendingRow {
    round_row: usize,
    mixed: Vec<f32>,
    /// Normalised q (scaled), k per key head, then v per value head.
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    beta: Vec<f32>,
    decay: Vec<f32>,
}

/// One DeltaNet layer's state for one slot.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuLinearState {
    /// The last K−1 pre-conv inputs, oldest first: `[K−1, channels]`.
    pub conv_tail: Vec<f32>,
    /// Recurrent state per value head, `[value_heads, value_dim, key_dim]` so each output is a contiguous dot.
    pub recurrent: Vec<f32>,
    /// The committed recurrent state at the start of the round, when `recurrent` was stepped past it.
    start: Option<Vec<f32>>,
    /// The rows stepped in place into `recurrent`, in order (a chain).
    in_place: Vec<usize>,
    pending: Vec<PendingRow>,
}

impl CpuLinearState {
    pub fn new(spec: &LinearSpec) -> Self {
        CpuLinearState {
            conv_tail: vec![0.0; (spec.conv_kernel - 1) * spec.conv_channels()],
            recurrent: vec![0.0; spec.value_heads * spec.value_dim * spec.key_dim],
            start: None,
            in_place: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// A copy of the committed state without any round in flight.
    pub fn committed_copy(&self) -> Self {
        let mut c = self.clone();
        if let Some(s) = &self.start {
            c.recurrent = s.clone();
        }
        c.start = None;
        c.in_place.clear();
        c.pending.clear();
        c
    }

    /// Commits the rows on `path` (round row indices, root first): conv tail and recurrent state become those
    /// after the last of them; every other pending row leaves no trace.
    pub fn keep(&mut self, spec: &LinearSpec, path: &[usize]) -> Result<(), String> {
        let pending = std::mem::take(&mut self.pending);
        let find = |r: usize| {
            pending
                .iter()
                .find(|p| p.round_row == r)
                .ok_or_else(|| format!("row {r} is not pending"))
        };
        let rows: Vec<&PendingRow> = path.iter().map(|&r| find(r)).collect::<Result<_, _>>()?;
        let channels = spec.conv_channels();
        for row in &rows {
            if spec.conv_kernel > 1 {
                self.conv_tail.copy_within(channels.., 0);
                let n = self.conv_tail.len();
                self.conv_tail[n - channels..].copy_from_slice(&row.mixed);
            }
        }
        if self.in_place.as_slice() != path {
            // The in-place state followed another branch (or more rows): replay the kept rows from the start.
            if let Some(start) = self.start.take() {
                self.recurrent = start;
            }
            let head_state = spec.value_dim * spec.key_dim;
            let group = spec.value_heads / spec.key_heads;
            self.recurrent
                .par_chunks_mut(head_state)
                .enumerate()
                .for_each(|(h, state)| {
                    for row in &rows {
                        step_head(spec, h, h / group, state, row, None);
                    }
                });
        }
        self.start = None;
        self.in_place.clear();
        Ok(())
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

/// One delta-rule step of value head `h` (key head `kh`) on `state` `[value_dim, key_dim]`; writes o if given.
fn step_head(
    spec: &LinearSpec,
    h: usize,
    kh: usize,
    state: &mut [f32],
    row: &PendingRow,
    o: Option<&mut [f32]>,
) {
    let (dk, dv) = (spec.key_dim, spec.value_dim);
    let q = &row.q[kh * dk..(kh + 1) * dk];
    let k = &row.k[kh * dk..(kh + 1) * dk];
    let v = &row.v[h * dv..(h + 1) * dv];
    let step = DeltaStep {
        decay: row.decay[h],
        beta: row.beta[h],
        k,
        q,
        v,
    };
    delta_rule_f32(state, dk, &step, o);
}

#[allow(clippy::too_many_arguments)]
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
    let (key_total, value_total) = (s.key_heads * s.key_dim, s.value_heads * s.value_dim);
    let group = s.value_heads / s.key_heads;
    let mut by_slot: Vec<Vec<usize>> = vec![Vec::new(); states.len()];
    for (i, r) in rows.iter().enumerate() {
        by_slot[r.slot].push(i);
    }

    // 1. Per row: conv over (committed tail + ancestors' inputs + own input), SiLU, norms and gates.
    let prepared: Vec<PendingRow> = (0..rows.len())
        .into_par_iter()
        .map(|i| {
            let tail = &states[rows[i].slot].conv_tail;
            let path = ancestry(rows, i);
            // The last K inputs ending at row i, oldest first: from the tail, then from the path.
            let window: Vec<&[f32]> = (0..kk)
                .map(|j| {
                    let back = kk - 1 - j; // 0 = row i itself
                    if back < path.len() {
                        mixed.row(path[path.len() - 1 - back])
                    } else {
                        let t = back - path.len(); // 0 = newest tail row
                        let tr = kk - 2 - t;
                        &tail[tr * channels..(tr + 1) * channels]
                    }
                })
                .collect();
            let mut x = vec![0.0f32; channels];
            for (c, xc) in x.iter_mut().enumerate() {
                let w = &p.conv[c * kk..(c + 1) * kk];
                let mut acc = 0.0f32;
                for j in 0..kk {
                    acc += window[j][c] * w[j];
                }
                *xc = silu(acc);
            }
            let mut q = x[..key_total].to_vec();
            let mut k = x[key_total..2 * key_total].to_vec();
            let q_scale = 1.0 / (s.key_dim as f32).sqrt();
            for head in q.chunks_mut(s.key_dim) {
                l2_normalize(head);
                head.iter_mut().for_each(|e| *e *= q_scale);
            }
            for head in k.chunks_mut(s.key_dim) {
                l2_normalize(head);
            }
            let beta = (0..s.value_heads).map(|h| sigmoid(b.row(i)[h])).collect();
            let decay = (0..s.value_heads)
                .map(|h| (-p.a_log[h].exp() * softplus(a.row(i)[h] + p.dt_bias[h])).exp())
                .collect();
            PendingRow {
                round_row: i,
                mixed: mixed.row(i).to_vec(),
                q,
                k,
                v: x[2 * key_total..].to_vec(),
                beta,
                decay,
            }
        })
        .collect();

    // 2. Per slot: is the round a chain stepped in place, or does some row branch off an earlier state?
    let mut out = CpuAct::zeros(rows.len(), value_total);
    let head_state = s.value_dim * s.key_dim;
    for (slot, st) in states.iter_mut().enumerate() {
        st.pending.clear();
        st.in_place.clear();
        st.start = None;
        let idxs = &by_slot[slot];
        if idxs.is_empty() {
            continue;
        }
        if idxs.len() > 1 {
            st.start = Some(st.recurrent.clone());
        }
        // Rows whose state a later non-next row branches from must be snapshotted.
        let mut snapshot_after = vec![false; idxs.len()];
        for (n, &i) in idxs.iter().enumerate() {
            let parent_local = rows[i]
                .parent
                .and_then(|pr| idxs.iter().position(|&x| x == pr));
            let expected_prev = if n == 0 { None } else { Some(n - 1) };
            if parent_local != expected_prev {
                if let Some(pl) = parent_local {
                    snapshot_after[pl] = true;
                }
            }
        }
        let start_state = st.start.clone();
        let ys: Vec<Vec<f32>> = st
            .recurrent
            .par_chunks_mut(head_state)
            .enumerate()
            .map(|(h, state)| {
                let kh = h / group;
                let mut snaps: Vec<Option<Vec<f32>>> = vec![None; idxs.len()];
                let mut ys = vec![0.0f32; idxs.len() * s.value_dim];
                let mut prev: Option<usize> = None;
                for (n, &i) in idxs.iter().enumerate() {
                    let parent_local = rows[i]
                        .parent
                        .and_then(|pr| idxs.iter().position(|&x| x == pr));
                    if parent_local != prev {
                        // Branch: restore the parent's state (or the round's start state).
                        let src = match parent_local {
                            Some(pl) => snaps[pl].as_deref(),
                            None => start_state
                                .as_deref()
                                .map(|st| &st[h * head_state..(h + 1) * head_state]),
                        };
                        if let Some(src) = src {
                            state.copy_from_slice(src);
                        }
                    }
                    let o = &mut ys[n * s.value_dim..(n + 1) * s.value_dim];
                    step_head(&s, h, kh, state, &prepared[i], Some(o));
                    if snapshot_after[n] {
                        snaps[n] = Some(state.to_vec());
                    }
                    prev = Some(n);
                }
                ys
            })
            .collect();
        // The in-place state now follows the chain ending at the slot's last row.
        st.in_place = ancestry(rows, *idxs.last().unwrap_or(&0));
        if st.in_place.len() != idxs.len() || st.in_place.iter().zip(idxs).any(|(a, b)| a != b) {
            // Not a pure chain: `keep` always replays.
            st.in_place = vec![usize::MAX];
        }
        for (n, &i) in idxs.iter().enumerate() {
            let zr = z.row(i);
            let orow = &mut out.data[i * value_total..(i + 1) * value_total];
            for (h, y) in ys.iter().enumerate() {
                let o = &y[n * s.value_dim..(n + 1) * s.value_dim];
                let inv = inv_rms(o, p.eps);
                for j in 0..s.value_dim {
                    orow[h * s.value_dim + j] =
                        p.norm[j] * (o[j] * inv) * silu(zr[h * s.value_dim + j]);
                }
            }
        }
        st.pending = idxs.iter().map(|&i| prepared[i].clone()).collect();
    }
    out
}
