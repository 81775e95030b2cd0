//! One round of the engine: every live stream contributes a prompt chunk or a window (pending token + draft
//! tree); the model runs them together; each window is walked (follow the first child whose token equals the
//! draw), its accepted path kept, and the drawn tokens streamed out.

use crate::api::{Event, FinishReason, Request, TokenLogprob, Usage};
use crate::drafter::{DraftTree, Drafter};
use crate::penalties::apply_penalties;
use std::time::Instant;
use tensorfold_backend::{Backend, RowRef};
use tensorfold_core::sampling::draw;
use tensorfold_core::Result;
use tensorfold_model::{Qwen35, SlotState};
use tokio::sync::mpsc::UnboundedSender;

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
}

impl<B: Backend> Stream<B> {
    fn generated(&self) -> &[u32] {
        &self.tokens[self.req.prompt.len()..]
    }
    pub fn prefilling(&self) -> bool {
        self.slot.len < self.req.prompt.len()
    }
}

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
}

/// Runs one round over `live`; returns the number of draft rows verified and accepted.
pub(crate) fn run_round<B: Backend>(
    model: &Qwen35<B>,
    live: &mut [Stream<B>],
    plan: &RoundPlan,
) -> Result<(usize, usize)> {
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
        } else if let Some(t) = st.pending {
            let first = rows.len();
            rows.push(RowRef {
                slot: si,
                pos: base,
                parent: None,
            });
            tokens.push(t);
            let left = st.req.max_tokens.saturating_sub(st.generated().len());
            let tree = match st.drafter.as_mut() {
                Some(d) if left > 1 && plan.max_draft > 0 => d
                    .propose(&st.tokens, plan.max_draft.min(left - 1))
                    .sanitized(plan.max_draft.min(left - 1)),
                _ => DraftTree::default(),
            };
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
    // Logits are needed at every window row and at the last row of a finished prompt.
    let mut logit_rows = Vec::new();
    let mut logit_at = vec![usize::MAX; rows.len()];
    for part in &parts {
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
    }
    let mut slots: Vec<&mut SlotState<B>> = live.iter_mut().map(|s| &mut s.slot).collect();
    let logits = model.forward(&rows, &tokens, &mut slots, &logit_rows)?;
    let vocab = model.config.vocab_size;
    let row_logits = |r: usize| &logits[logit_at[r] * vocab..(logit_at[r] + 1) * vocab];
    let (mut drafted, mut accepted) = (0, 0);
    for (si, st) in live.iter_mut().enumerate() {
        match parts[si] {
            Part::None => {}
            Part::Prompt { first, n, last } => {
                let path: Vec<usize> = (first..first + n).collect();
                model.keep(&mut st.slot, &path)?;
                if last {
                    walk(st, &rows, first + n - 1, &[], &row_logits);
                }
            }
            Part::Window { first, n } => {
                st.pending = None;
                // (row, parent row, token) of every draft row.
                let children: Vec<(usize, usize, u32)> = (first + 1..first + n)
                    .map(|r| (r, rows[r].parent.unwrap_or(first), tokens[r]))
                    .collect();
                let path = walk(st, &rows, first, &children, &row_logits);
                drafted += n - 1;
                accepted += path.len() - 1;
                st.usage.drafted += n - 1;
                st.usage.accepted += path.len() - 1;
                model.keep(&mut st.slot, &path)?;
            }
        }
    }
    Ok((drafted, accepted))
}

/// Depth of each draft node below the pending row (children of the pending row have depth 0).
fn depths(tree: &DraftTree) -> Vec<usize> {
    let mut d = vec![0; tree.len()];
    for i in 0..tree.len() {
        d[i] = tree.parents[i].map_or(0, |p| d[p] + 1);
    }
    d
}

/// Draws from row `start` on, following the first child whose token equals each draw; emits every drawn token
/// and returns the kept path (round rows, root first). The last draw without a matching child becomes pending.
fn walk<'a, B: Backend>(
    st: &mut Stream<B>,
    rows: &[RowRef],
    start: usize,
    children: &[(usize, usize, u32)],
    row_logits: &impl Fn(usize) -> &'a [f32],
) -> Vec<usize> {
    let mut path = vec![start];
    let mut cur = start;
    if st.generated().len() >= st.req.max_tokens {
        st.finished = Some(FinishReason::Length);
        return path;
    }
    loop {
        let mut row = row_logits(cur).to_vec();
        apply_penalties(&mut row, &st.req.penalties, &st.req.prompt, st.generated());
        let pos = rows[cur].pos as u64 + 1;
        let token = draw(&row, &st.req.sampling, pos);
        if !st.req.ignore_eos && st.req.stop_ids.contains(&token) {
            st.finished = Some(FinishReason::Stop);
            return path;
        }
        let logprob = st
            .req
            .logprobs
            .map(|n| token_logprob(&row, token, n, st.req.sampling.temperature));
        st.tokens.push(token);
        st.first_token_secs
            .get_or_insert_with(|| st.started.elapsed().as_secs_f64());
        if st.events.send(Event::Token { id: token, logprob }).is_err() {
            st.finished = Some(FinishReason::Cancelled);
            return path;
        }
        if st.generated().len() >= st.req.max_tokens {
            st.finished = Some(FinishReason::Length);
            return path;
        }
        match children
            .iter()
            .find(|&&(_, parent, t)| parent == cur && t == token)
        {
            Some(&(r, _, _)) => {
                path.push(r);
                cur = r;
            }
            None => {
                st.pending = Some(token);
                return path;
            }
        }
    }
}

/// Log-probability of `token` under softmax(row / T) (T = 1 when greedy) and the `n` best alternatives.
pub(crate) fn token_logprob(row: &[f32], token: u32, n: usize, temperature: f32) -> TokenLogprob {
    let t = if temperature > 0.0 {
        temperature as f64
    } else {
        1.0
    };
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64 / t;
    let lse = m + row
        .iter()
        .map(|&l| (l as f64 / t - m).exp())
        .sum::<f64>()
        .ln();
    let lp = |id: u32| (row[id as usize] as f64 / t - lse) as f32;
    let n = n.min(row.len());
    let mut top: Vec<u32> = (0..row.len() as u32).collect();
    let by_rank = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
    if n > 0 {
        top.select_nth_unstable_by(n - 1, by_rank);
        top.truncate(n);
        top.sort_by(by_rank);
    } else {
        top.clear();
    }
    TokenLogprob {
        logprob: lp(token),
        top: top.into_iter().map(|id| (id, lp(id))).collect(),
    }
}
