//! One round of the engine: every live stream contributes a prompt chunk or a window (pending token + draft
//! tree); the model runs them together; each window is walked (follow the first child whose token equals the
//! draw), its accepted path kept, the drawn tokens streamed out, and the next windows drafted.

use crate::api::{EngineTimes, Event, FinishReason, Request, Usage};
use crate::drafters::mtp::{absorb_and_draft, Absorb};
use crate::drafters::{DraftTree, Drafter};
use crate::penalties::penalty_edits;
use crate::plan::{cap_trees, Drafting, Planner};
use crate::walk::{walk, RowOut};
use std::time::Instant;
use tensorfold_backend::{Backend, RowRef};
use tensorfold_core::sampling::{KeyedRule, RowDraw};
use tensorfold_core::Result;
use tensorfold_model::{MtpSlot, Qwen35, SlotState};
use tokio::sync::mpsc::UnboundedSender;

/// Where a window's drafts came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Copy,
    Mtp,
}

pub(crate) struct Stream<B: Backend> {
    pub req: Request,
    pub events: UnboundedSender<Event>,
    pub slot: SlotState<B>,
    /// Prompt followed by every emitted token.
    pub tokens: Vec<u32>,
    /// Drawn and emitted but not yet run through the model.
    pub pending: Option<u32>,
    pub drafter: Option<Box<dyn Drafter>>,
    pub reserved_pages: usize,
    pub started: Instant,
    pub first_token_secs: Option<f64>,
    pub usage: Usage,
    pub finished: Option<FinishReason>,
    /// The MTP head's state for this stream (its own KV), when the stream drafts with the head.
    pub mtp: Option<MtpSlot<B>>,
    /// The next window's drafts, planned at the end of the last round.
    pub next: Option<(DraftTree, Source)>,
    /// The stream's drafting state: how each source's drafts land, what the head has yet to absorb.
    pub drafting: Drafting,
}

impl<B: Backend> Stream<B> {
    pub(crate) fn generated(&self) -> &[u32] {
        &self.tokens[self.req.prompt.len()..]
    }
    pub fn prefilling(&self) -> bool {
        self.slot.len < self.req.prompt.len()
    }
}

/// Rows of its backlog an idle head absorbs for a probe draft.
const PROBE_ROWS: usize = 32;

/// What a stream put into the round.
enum Part {
    None,
    /// Prompt rows [first, first + n) of the round; `last` = they finish the prompt.
    Prompt {
        first: usize,
        n: usize,
        last: bool,
    },
    /// Window rows [first, first + n): row `first` is the pending token, then the draft nodes.
    Window {
        first: usize,
        n: usize,
    },
}

pub(crate) struct RoundPlan {
    pub prompt_budget: usize,
    pub max_draft: usize,
    /// Prompt positions where a chunk must end (prompt-cache marks), per stream.
    pub marks: Vec<Vec<usize>>,
    /// Most window rows (every stream's pending row and drafts) in one round.
    pub max_round_rows: usize,
    /// Longest MTP chain and the head's confidence threshold.
    pub mtp_depth: usize,
    pub mtp_min_prob: f32,
    /// Choose MTP widths from measured round costs (else always the longest chain).
    pub plan_widths: bool,
    /// Kept rows a stream's backlog holds for the head while it does not draft.
    pub mtp_history: usize,
}

/// The window a stream puts into this round: the drafts planned last round (or, failing that, its drafter's
/// proposal now), trimmed to what the reply can still use.
fn window_tree<B: Backend>(st: &mut Stream<B>, max_draft: usize) -> Option<(DraftTree, Source)> {
    if st.finished.is_some() || st.prefilling() || st.pending.is_none() {
        return None;
    }
    let left = st.req.max_tokens.saturating_sub(st.generated().len());
    let max = max_draft.min(left.saturating_sub(1));
    let (tree, source) = match st.next.take() {
        Some(planned) => planned,
        None => match st.drafter.as_mut() {
            Some(d) if max > 0 => (d.propose(&st.tokens, max), Source::Copy),
            _ => (DraftTree::default(), Source::Copy),
        },
    };
    Some((tree.sanitized(max), source))
}

/// Runs one round over `live`; returns the number of draft rows verified and accepted. Adds its phases to `times`.
pub(crate) fn run_round<B: Backend>(
    model: &Qwen35<B>,
    live: &mut [Stream<B>],
    plan: &RoundPlan,
    planner: &mut Planner,
    times: &mut EngineTimes,
) -> Result<(usize, usize)> {
    let mut lap = Instant::now();
    // Windows first, so that a shared round's rows are capped before they are laid out.
    let mut sources = Vec::with_capacity(live.len());
    let mut trees: Vec<Option<DraftTree>> = live
        .iter_mut()
        .map(|st| {
            let w = window_tree(st, plan.max_draft);
            sources.push(w.as_ref().map_or(Source::Copy, |w| w.1));
            w.map(|w| w.0)
        })
        .collect();
    cap_trees(&mut trees, plan.max_round_rows.max(1));
    let mut rows: Vec<RowRef> = Vec::new();
    let mut tokens = Vec::new();
    let mut parts = Vec::with_capacity(live.len());
    let mut budget = plan.prompt_budget.max(1);
    for (si, st) in live.iter_mut().enumerate() {
        let base = st.slot.len;
        if st.finished.is_some() {
            parts.push(Part::None);
        } else if st.prefilling() {
            let plen = st.req.prompt.len();
            let next_mark = plan.marks[si]
                .iter()
                .copied()
                .filter(|&m| m > base && m < plen)
                .min()
                .unwrap_or(plen);
            let n = (next_mark - base).min(budget);
            if n == 0 {
                parts.push(Part::None);
                continue;
            }
            budget -= n;
            let first = rows.len();
            for i in 0..n {
                rows.push(RowRef::chain(si, base, first, i));
                tokens.push(st.req.prompt[base + i]);
            }
            parts.push(Part::Prompt {
                first,
                n,
                last: base + n == plen,
            });
        } else if let (Some(t), Some(tree)) = (st.pending, trees[si].take()) {
            let first = rows.len();
            rows.push(RowRef {
                slot: si,
                pos: base,
                parent: None,
            });
            tokens.push(t);
            let depth = depths(&tree);
            for (j, (&p, &tok)) in tree.parents.iter().zip(&tree.tokens).enumerate() {
                let parent = Some(first + p.map_or(0, |p| p + 1));
                rows.push(RowRef {
                    slot: si,
                    pos: base + 1 + depth[j],
                    parent,
                });
                tokens.push(tok);
            }
            parts.push(Part::Window {
                first,
                n: 1 + tree.len(),
            });
        } else {
            parts.push(Part::None);
        }
    }
    if rows.is_empty() {
        return Ok((0, 0));
    }
    // Logits are needed at every window row and at the last row of a finished prompt; taps (the MTP head's
    // input) at every row of a stream that drafts with the head.
    let mut logit_rows = Vec::new();
    let mut logit_at = vec![usize::MAX; rows.len()];
    let mut tap_rows = Vec::new();
    let mut tap_at = vec![usize::MAX; rows.len()];
    for (si, part) in parts.iter().enumerate() {
        let wanted: Vec<usize> = match *part {
            Part::Prompt {
                first,
                n,
                last: true,
            } => vec![first + n - 1],
            Part::Window { first, n } => (first..first + n).collect(),
            _ => Vec::new(),
        };
        for r in wanted {
            logit_at[r] = logit_rows.len();
            logit_rows.push(r);
        }
        let st = &live[si];
        if st.mtp.is_some() && plan.max_draft > 0 {
            let span = match *part {
                Part::Prompt { first, n, .. } => first..first + n,
                Part::Window { first, n } => first..first + n,
                _ => 0..0,
            };
            for r in span {
                tap_at[r] = tap_rows.len();
                tap_rows.push(r);
            }
        }
    }
    let mut slots: Vec<&mut SlotState<B>> = live.iter_mut().map(|s| &mut s.slot).collect();
    let started = Instant::now();
    let (logits, taps) = model.forward_round(&rows, &tokens, &mut slots, &logit_rows, &tap_rows)?;
    EngineTimes::lap(&mut times.forward_us, &mut lap);
    // What a prompt chunk or a window without drafts keeps does not depend on the draws, so it is queued now,
    // behind the round's work: on a GPU the keep then runs while the host waits for the draws (as in `generate`)
    // instead of after them with the device idle. The same keep, so the same state.
    let mut early: Vec<Option<Vec<usize>>> = parts
        .iter()
        .map(|part| match *part {
            Part::Prompt { first, n, .. } => Some((first..first + n).collect()),
            Part::Window { first, n: 1 } => Some(vec![first]),
            _ => None,
        })
        .collect();
    let keeping = Instant::now();
    let paths: Vec<Option<&[usize]>> = early.iter().map(Option::as_deref).collect();
    keep_slots(model, live, &paths)?;
    // Not part of the round's cost for the window planner: a drafted window's keep comes after its timing.
    let keep_secs = keeping.elapsed().as_secs_f64();
    EngineTimes::lap(&mut times.keep_us, &mut lap);
    // A backend that draws where the logits are draws every row of the streams that need no host logits at once
    // (each row's token depends on that row alone, so drawing rows the walk never reaches changes nothing).
    let vocab = model.config.vocab_size;
    let on_device = model.backend.draws_on_device();
    let mut outs: Vec<Option<RowOut>> = (0..rows.len()).map(|_| None).collect();
    if on_device {
        let (mut draws, mut edits, mut at) = (Vec::new(), Vec::new(), Vec::new());
        for (r, &l) in logit_at.iter().enumerate() {
            let st = &live[rows[r].slot];
            let Some(rule) = (l != usize::MAX)
                .then(|| keyed_rule(&st.req, vocab))
                .flatten()
            else {
                continue;
            };
            if !st.req.penalties.is_off() {
                let seen = row_completion(st, &rows, &tokens, &parts[rows[r].slot], r);
                edits.extend(penalty_edits(
                    l,
                    &st.req.penalties,
                    &st.req.prompt,
                    &seen,
                    vocab,
                ));
            }
            draws.push(RowDraw {
                row: l,
                rule,
                position: rows[r].pos as u64 + 1,
            });
            at.push(r);
        }
        for (r, t) in at.into_iter().zip(logits.draws(&draws, &edits)) {
            outs[r] = Some(RowOut::Drawn(t));
        }
        // The rows the host draws from are read now, so the round's time covers the device's work.
        for (r, &l) in logit_at.iter().enumerate() {
            if l != usize::MAX && outs[r].is_none() {
                outs[r] = Some(RowOut::Logits(logits.row(l)));
            }
        }
    }
    planner.record_round(rows.len(), started.elapsed().as_secs_f64() - keep_secs);
    EngineTimes::lap(&mut times.wait_us, &mut lap);
    // Each row is walked at most once, so its output is handed over, not copied; on the host, rows are read as
    // the walk reaches them.
    let mut row_logits = |r: usize| {
        outs[r]
            .take()
            .unwrap_or_else(|| RowOut::Logits(logits.row(logit_at[r])))
    };
    let (mut drafted, mut accepted) = (0, 0);
    let mut kept: Vec<Vec<usize>> = vec![Vec::new(); live.len()];
    for (si, st) in live.iter_mut().enumerate() {
        match parts[si] {
            Part::None => {}
            Part::Prompt { first, n, last } => {
                if last {
                    walk(st, &rows, first + n - 1, &[], &mut row_logits);
                }
                kept[si] = early[si].take().unwrap_or_default();
            }
            Part::Window { first, n } => {
                st.pending = None;
                // (row, parent row, token) of every draft row.
                let children: Vec<(usize, usize, u32)> = (first + 1..first + n)
                    .map(|r| (r, rows[r].parent.unwrap_or(first), tokens[r]))
                    .collect();
                let path = walk(st, &rows, first, &children, &mut row_logits);
                drafted += n - 1;
                accepted += path.len() - 1;
                st.usage.drafted += n - 1;
                st.usage.accepted += path.len() - 1;
                let (d, a) = (n - 1, path.len() - 1);
                match sources[si] {
                    Source::Mtp => {
                        st.drafting.mtp_accept.record(d, a);
                        planner.mtp_accept.record(d, a);
                    }
                    Source::Copy => {
                        st.drafting.copy_accept.record(d, a);
                        planner.copy_accept.record(d, a);
                    }
                }
                kept[si] = path;
            }
        }
    }
    // The drafted windows' accepted paths, every slot's in one keep.
    let late: Vec<Option<&[usize]>> = kept
        .iter()
        .zip(&parts)
        .map(|(path, part)| {
            matches!(part, Part::Window { n, .. } if *n > 1).then_some(path.as_slice())
        })
        .collect();
    keep_slots(model, live, &late)?;
    EngineTimes::lap(&mut times.walk_us, &mut lap);
    if plan.max_draft > 0 {
        draft_next(model, live, &rows, &kept, &taps, &tap_at, plan, planner)?;
    }
    EngineTimes::lap(&mut times.draft_us, &mut lap);
    Ok((drafted, accepted))
}

/// Keeps `paths[i]` in stream i's slot where it is given, all slots in one `keep_many`.
fn keep_slots<B: Backend>(
    model: &Qwen35<B>,
    live: &mut [Stream<B>],
    paths: &[Option<&[usize]>],
) -> Result<()> {
    let mut items: Vec<(&mut SlotState<B>, &[usize])> = live
        .iter_mut()
        .zip(paths)
        .filter_map(|(st, p)| Some((&mut st.slot, (*p)?)))
        .collect();
    if items.is_empty() {
        return Ok(());
    }
    model.keep_many(&mut items)
}

/// Plans every stream's next window: a copy when its drafter is confident, else an MTP chain whose width the
/// planner picks; the head absorbs this round's kept rows of every stream it drafts for, drafting or not.
#[allow(clippy::too_many_arguments)]
fn draft_next<B: Backend>(
    model: &Qwen35<B>,
    live: &mut [Stream<B>],
    rows: &[RowRef],
    kept: &[Vec<usize>],
    taps: &[f32],
    tap_at: &[usize],
    plan: &RoundPlan,
    planner: &mut Planner,
) -> Result<()> {
    let others = live
        .iter()
        .filter(|s| s.finished.is_none() && s.pending.is_some())
        .count()
        .saturating_sub(1);
    let h = model.config.hidden_size;
    let head_pays = planner.width(
        planner.mtp_accept.rate(),
        0,
        plan.mtp_depth,
        planner.mtp_step(),
    ) > 0;
    let mut jobs = Vec::new();
    let mut job_streams = Vec::new();
    for (si, st) in live.iter_mut().enumerate() {
        // Every kept row whose next token is known (all of them while the stream runs) joins the stream's latest
        // rows: what the head absorbs when it drafts again (one call, cheaper than one per round) and the context a
        // prompt-cache snapshot stores, kept up to the last row even of a finishing stream (it is cached too).
        if st.mtp.is_some() {
            for &r in &kept[si] {
                let (pos, t) = (rows[r].pos, tap_at[r]);
                if pos + 1 < st.tokens.len() && t != usize::MAX {
                    let latest = &mut st.drafting.latest;
                    latest.push(pos, st.tokens[pos + 1], &taps[t * h..(t + 1) * h]);
                    latest.trim(plan.mtp_history);
                }
            }
        }
        if st.finished.is_some() {
            continue;
        }
        let (mut want_mtp, mut probing) = (0, false);
        let decoding = st.pending.is_some() && !st.prefilling();
        let dr = &mut st.drafting;
        if decoding {
            let left = st
                .req
                .max_tokens
                .saturating_sub(st.tokens.len() - st.req.prompt.len());
            let max = plan.max_draft.min(left.saturating_sub(1));
            let mut copy = match st.drafter.as_mut() {
                Some(d) if max > 0 => d.propose(&st.tokens, max).sanitized(max),
                _ => DraftTree::default(),
            };
            if plan.plan_widths && !copy.is_empty() {
                let planned = planner.width(dr.copy_accept.rate(), others, copy.len(), 0.0);
                let keep = dr.copy_idle.width(planned, copy.len());
                copy = copy.sanitized(keep);
            }
            let depth = plan.mtp_depth.min(max);
            if copy.is_empty() && st.mtp.is_some() && depth > 0 {
                want_mtp = if plan.plan_widths {
                    let w = planner.width(dr.mtp_accept.rate(), others, depth, planner.mtp_step());
                    probing = w == 0;
                    dr.mtp_idle.width(w, 1)
                } else {
                    depth
                };
            }
            st.next = Some((copy, Source::Copy));
        }
        let Some(slot) = st.mtp.as_mut() else {
            continue;
        };
        // Prompt rows are absorbed as they are computed (part of prefill, not of the first drafted window) while
        // the head pays on this engine; otherwise they wait among the latest rows like idle rows.
        let prompt = head_pays
            && kept[si]
                .last()
                .is_some_and(|&r| rows[r].pos < st.req.prompt.len());
        let (end, mut from) = (dr.latest.end(), dr.absorbed.max(dr.latest.first_pos));
        if (want_mtp == 0 && !prompt) || from >= end {
            continue;
        }
        if probing && end - from > PROBE_ROWS {
            // A probe only measures: it absorbs the latest rows, not the whole backlog.
            from = end - PROBE_ROWS / 2;
        }
        let b = dr.latest.rows_from(from);
        dr.absorbed = end;
        if slot.next_pos != Some(b.first_pos) {
            // Rows were dropped from the backlog: the head resumes after a gap in its KV.
            slot.next_pos = None;
        }
        jobs.push(Absorb {
            first_pos: b.first_pos,
            hidden: b.hidden,
            next: b.next,
            drafts: want_mtp,
            sampling: st.req.sampling.clone(),
            min_prob: plan.mtp_min_prob,
        });
        job_streams.push(si);
    }
    let Some(head) = model.mtp.as_ref() else {
        return Ok(());
    };
    if jobs.is_empty() {
        return Ok(());
    }
    let mut slots: Vec<&mut MtpSlot<B>> = Vec::with_capacity(jobs.len());
    for (si, st) in live.iter_mut().enumerate() {
        if job_streams.contains(&si) {
            if let Some(m) = st.mtp.as_mut() {
                slots.push(m);
            }
        }
    }
    let (drafts, step_secs) = absorb_and_draft(model, head, &mut slots, &jobs)?;
    if let Some(s) = step_secs {
        planner.record_mtp_step(s);
    }
    for (j, chain) in drafts.into_iter().enumerate() {
        let st = &mut live[job_streams[j]];
        if chain.is_empty() {
            // The head was not confident enough to draft: as good as a miss for planning.
            st.drafting.mtp_accept.record(1, 0);
        } else {
            st.next = Some((DraftTree::chain(chain), Source::Mtp));
        }
    }
    Ok(())
}

/// The keyed rule a request's rows can be drawn by without the host seeing the logits (penalties go with the
/// draw as edits): none when logprobs are wanted from them.
pub(crate) fn keyed_rule(req: &Request, vocab: usize) -> Option<KeyedRule> {
    if req.logprobs.is_some() {
        return None;
    }
    Some(req.sampling.keyed_rule(vocab))
}

/// The completion row `r`'s draw sees, as the walk will have it on reaching that row: the stream's tokens so far,
/// then the drafted tokens on the row's path (a window row's ancestors below the window's first row, and itself).
fn row_completion<B: Backend>(
    st: &Stream<B>,
    rows: &[RowRef],
    tokens: &[u32],
    part: &Part,
    r: usize,
) -> Vec<u32> {
    let mut path = Vec::new();
    if let Part::Window { first, .. } = *part {
        let mut x = r;
        while x != first {
            path.push(tokens[x]);
            x = rows[x].parent.unwrap_or(first);
        }
    }
    let mut seen = st.generated().to_vec();
    seen.extend(path.iter().rev());
    seen
}

/// Depth of each draft node below the pending row (children of the pending row have depth 0).
fn depths(tree: &DraftTree) -> Vec<usize> {
    let mut d = vec![0; tree.len()];
    for i in 0..tree.len() {
        d[i] = tree.parents[i].map_or(0, |p| d[p] + 1);
    }
    d
}
