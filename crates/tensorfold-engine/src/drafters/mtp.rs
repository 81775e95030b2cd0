//! The MTP drafter's round: the head absorbs the target rows each stream kept (so its KV follows the kept path),
//! then drafts a chain per stream by feeding its own output back, stopping early below a confidence threshold.
//! While it does not draft for a stream, the kept rows wait among the stream's bounded latest rows instead.

use std::time::Instant;
use tensorfold_backend::{Backend, RowRef};
use tensorfold_core::sampling::{draw, keyed_exp, RowDraw, SamplingParams, TOP_MAX};
use tensorfold_core::Result;
use tensorfold_model::{Logits, Mtp, MtpSlot, Qwen35};

use crate::prompt_cache::HeadContext;

/// Kept target rows for the head: consecutive positions from `first_pos`, the token after each and its tap
/// (final-normed hidden, `[rows, hidden]`).
#[derive(Clone, Default)]
pub(crate) struct Backlog {
    pub first_pos: usize,
    pub next: Vec<u32>,
    pub hidden: Vec<f32>,
}

impl Backlog {
    /// Appends the row at `pos`; a row that does not follow the last one starts the backlog over.
    pub fn push(&mut self, pos: usize, next: u32, tap: &[f32]) {
        if self.next.is_empty() || pos != self.end() {
            self.next.clear();
            self.hidden.clear();
            self.first_pos = pos;
        }
        self.next.push(next);
        self.hidden.extend_from_slice(tap);
    }
    /// Keeps about the latest `rows` rows (the head then starts over after a gap, which costs drafts, not
    /// tokens); trims only past twice that, so the copying stays amortised.
    pub fn trim(&mut self, rows: usize) {
        if self.next.len() <= 2 * rows {
            return;
        }
        let drop = self.next.len() - rows;
        if drop > 0 {
            let h = self.hidden.len() / self.next.len();
            self.next.drain(..drop);
            self.hidden.drain(..drop * h);
            self.first_pos += drop;
        }
    }
    /// Position after the last row held.
    pub fn end(&self) -> usize {
        self.first_pos + self.next.len()
    }
    /// A copy of the rows from position `pos` (at or after `first_pos`) on.
    pub fn rows_from(&self, pos: usize) -> Backlog {
        let skip = pos - self.first_pos;
        let h = self.hidden.len() / self.next.len().max(1);
        Backlog {
            first_pos: pos,
            next: self.next[skip..].to_vec(),
            hidden: self.hidden[skip * h..].to_vec(),
        }
    }
    /// The taps of the rows before `len` (a snapshot's end), when the rows held reach up to `len - 1`.
    pub fn context_before(&self, len: usize) -> Option<HeadContext> {
        if self.next.is_empty() || self.end() < len || len <= self.first_pos {
            return None;
        }
        let h = self.hidden.len() / self.next.len();
        Some(HeadContext {
            first_pos: self.first_pos,
            hidden: self.hidden[..(len - self.first_pos) * h].to_vec(),
        })
    }
    /// The rows of a cached context, each paired with the token that follows it in `tokens` (the resumed stream's
    /// prompt, which runs past the context's last row).
    pub fn from_context(ctx: &HeadContext, tokens: &[u32], h: usize) -> Option<Self> {
        let rows = ctx.hidden.len() / h;
        let next = tokens.get(ctx.first_pos + 1..ctx.first_pos + 1 + rows)?;
        Some(Backlog {
            first_pos: ctx.first_pos,
            next: next.to_vec(),
            hidden: ctx.hidden.clone(),
        })
    }
}

/// One stream's share of the head's round: the target rows it kept and what followed each.
pub(crate) struct Absorb {
    /// Position of the first row (the rows are consecutive).
    pub first_pos: usize,
    /// The taps of the rows, `[rows, hidden]`.
    pub hidden: Vec<f32>,
    /// The token after each row (the next row's, and for the last one the stream's pending token).
    pub next: Vec<u32>,
    /// Drafts wanted for the stream's next window (0 = absorb only).
    pub drafts: usize,
    /// The request's sampling: drafts are drawn with the target's own keyed noise at their positions, so a draft
    /// that matches the target's distribution also matches its draw.
    pub sampling: SamplingParams,
    /// Drafts end at the first one whose probability under the head is below this.
    pub min_prob: f32,
}

/// Probability of `token` under softmax(row / T) (T = 1 when greedy).
fn probability(row: &[f32], token: u32, temperature: f32) -> f32 {
    let t = if temperature > 0.0 { temperature } else { 1.0 };
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = row.iter().map(|&l| ((l - max) / t).exp()).sum();
    ((row[token as usize] - max) / t).exp() / sum
}

struct Chain {
    job: usize,
    /// Position of the last absorbed row; chain row i sits at last + 1 + i.
    last: usize,
    drafts: Vec<u32>,
    /// The head's output after each row so far: the `h` input of the chain rows.
    hidden: Vec<f32>,
    done: bool,
}

/// The host's share of a chained draft step: the head's draw at `pos` (the target's keyed rule) and that draw's
/// probability under the head, from the head's logit row brought to the host.
pub fn draft_draw(logits: &[f32], sampling: &SamplingParams, pos: u64) -> (u32, f32) {
    let y = draw(logits, sampling, pos);
    (y, probability(logits, y, sampling.temperature))
}

/// What one chain's next draft is drawn by: the request's sampling, the position, the head's threshold.
pub type Pick<'a> = (&'a SamplingParams, u64, f32);

/// Each chain's next draft and its probability under the head, from row k of `logits` for `picks[k]`. Where the
/// backend draws, so do the drafts: the target's keyed rule on the device, and the probability from the row's best
/// ranks and keyed softmax total (`row_top`). At least ceil(1 / min_prob) ranks
/// are read, so a draft outside them is below min_prob anyway and gets probability 0. A GPU then reads back a
/// token and a few ranks a chain instead of the vocabulary's logits and a host softmax (1.75 ms a step greedy,
/// 15.9 ms at temperature 0.8 on the 27B shape: BENCHMARKS.md §7, call 139). Drafts only decide what is verified,
/// never what is emitted.
pub fn next_drafts<B: Backend>(
    model: &Qwen35<B>,
    logits: &Logits<'_, B>,
    picks: &[Pick<'_>],
) -> Vec<(u32, f32)> {
    if !model.backend.draws_on_device() {
        return picks
            .iter()
            .enumerate()
            .map(|(k, (sampling, pos, _))| draft_draw(&logits.row(k), sampling, *pos))
            .collect();
    }
    let vocab = model.config.vocab_size;
    let draws: Vec<RowDraw> = picks
        .iter()
        .enumerate()
        .map(|(k, (sampling, pos, _))| RowDraw {
            row: k,
            rule: sampling.keyed_rule(vocab),
            position: *pos,
        })
        .collect();
    let tokens = logits.draws(&draws, &[]);
    let inv_t = |sampling: &SamplingParams| {
        let t = sampling.temperature;
        if t > 0.0 {
            1.0 / t as f64
        } else {
            1.0
        }
    };
    let asks: Vec<(usize, f64, usize)> = picks
        .iter()
        .enumerate()
        .filter(|(_, (_, _, min_prob))| *min_prob > 0.0)
        .map(|(k, (sampling, _, min_prob))| {
            let ranks = (1.0 / *min_prob as f64).ceil() as usize;
            (k, inv_t(sampling), ranks.clamp(1, TOP_MAX))
        })
        .collect();
    let mut tops = logits.tops(&asks).into_iter();
    picks
        .iter()
        .zip(tokens)
        .map(|((sampling, _, min_prob), y)| {
            if *min_prob <= 0.0 {
                return (y, 1.0);
            }
            let Some(top) = tops.next() else {
                return (y, 0.0);
            };
            let it = inv_t(sampling);
            let best = top.ranked.first().map_or(0.0, |r| r.1 as f64 * it);
            let p = match top.ranked.iter().find(|r| r.0 == y) {
                Some(&(_, l)) if top.total > 0.0 => keyed_exp(l as f64 * it - best) / top.total,
                _ => 0.0,
            };
            (y, p as f32)
        })
        .collect()
}

impl Chain {
    /// How the next draft is drawn: the job's sampling at the next draft's position (the target's keyed noise
    /// there), against the job's threshold.
    fn pick<'a>(&self, job: &'a Absorb) -> Pick<'a> {
        (
            &job.sampling,
            (self.last + 2 + self.drafts.len()) as u64,
            job.min_prob,
        )
    }

    /// Takes the head's next draft (its draw and probability) and output for the chain's newest row, or ends
    /// the chain.
    fn push(&mut self, job: &Absorb, (y, p): (u32, f32), out: &[f32]) {
        if p < job.min_prob {
            self.done = true;
            return;
        }
        self.drafts.push(y);
        self.hidden.extend_from_slice(out);
        self.done = self.drafts.len() >= job.drafts;
    }
}

/// Runs the head over every job (slot `j` of `slots` belongs to `jobs[j]`): absorbs and keeps the rows, then
/// drafts. Returns each job's drafts and the seconds of one decode-sized head call (None when no call was one:
/// a long backlog's absorb says nothing about a chained step).
pub(crate) fn absorb_and_draft<B: Backend>(
    model: &Qwen35<B>,
    head: &Mtp<B>,
    slots: &mut [&mut MtpSlot<B>],
    jobs: &[Absorb],
) -> Result<(Vec<Vec<u32>>, Option<f64>)> {
    let h = model.config.hidden_size;
    let (mut rows, mut tokens, mut hidden, mut out_rows) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut firsts = Vec::with_capacity(jobs.len());
    for (j, job) in jobs.iter().enumerate() {
        let first = rows.len();
        firsts.push(first);
        for (i, &next) in job.next.iter().enumerate() {
            rows.push(RowRef::chain(j, job.first_pos, first, i));
            tokens.push(next);
        }
        hidden.extend_from_slice(&job.hidden);
        if job.drafts > 0 && !job.next.is_empty() {
            out_rows.push(rows.len() - 1);
        }
    }
    if rows.is_empty() {
        return Ok((vec![Vec::new(); jobs.len()], None));
    }
    let started = Instant::now();
    let (logits, out) = head.forward_logits(model, &rows, &tokens, &hidden, slots, &out_rows)?;
    for (j, job) in jobs.iter().enumerate() {
        let path: Vec<usize> = (firsts[j]..firsts[j] + job.next.len()).collect();
        head.keep(&model.backend, slots[j], &path, job.first_pos)?;
    }
    let mut chains: Vec<Chain> = jobs
        .iter()
        .enumerate()
        .filter(|(_, job)| job.drafts > 0 && !job.next.is_empty())
        .map(|(j, job)| Chain {
            job: j,
            last: job.first_pos + job.next.len() - 1,
            drafts: Vec::new(),
            hidden: Vec::new(),
            done: false,
        })
        .collect();
    let picks: Vec<Pick> = chains.iter().map(|c| c.pick(&jobs[c.job])).collect();
    let first_drafts = next_drafts(model, &logits, &picks);
    for (k, (c, d)) in chains.iter_mut().zip(first_drafts).enumerate() {
        c.push(&jobs[c.job], d, &out[k * h..(k + 1) * h]);
    }
    // Each step re-runs every pending chain row: drafts are never kept, and a slot forgets what it did not keep.
    let absorb_secs = started.elapsed().as_secs_f64();
    let decode_sized = rows.len() <= 2 * jobs.len();
    let (mut steps, chain_started) = (0usize, Instant::now());
    loop {
        let active: Vec<usize> = (0..chains.len()).filter(|&c| !chains[c].done).collect();
        if active.is_empty() {
            break;
        }
        let (mut rows, mut tokens, mut hidden, mut out_rows) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for &c in &active {
            let ch = &chains[c];
            let first = rows.len();
            for (i, &t) in ch.drafts.iter().enumerate() {
                rows.push(RowRef::chain(ch.job, ch.last + 1, first, i));
                tokens.push(t);
            }
            hidden.extend_from_slice(&ch.hidden);
            out_rows.push(rows.len() - 1);
        }
        let (logits, out) =
            head.forward_logits(model, &rows, &tokens, &hidden, slots, &out_rows)?;
        steps += 1;
        let picks: Vec<Pick> = active
            .iter()
            .map(|&c| chains[c].pick(&jobs[chains[c].job]))
            .collect();
        let next = next_drafts(model, &logits, &picks);
        for (k, (&c, d)) in active.iter().zip(next).enumerate() {
            let job = &jobs[chains[c].job];
            chains[c].push(job, d, &out[k * h..(k + 1) * h]);
        }
    }
    let step_secs = if steps > 0 {
        Some(chain_started.elapsed().as_secs_f64() / steps as f64)
    } else {
        decode_sized.then_some(absorb_secs)
    };
    let mut drafts = vec![Vec::new(); jobs.len()];
    for c in chains {
        drafts[c.job] = c.drafts;
    }
    Ok((drafts, step_secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_context_resumes_as_the_rows_before_the_key_with_the_new_prompts_tokens() {
        let mut b = Backlog::default();
        for pos in 2..9 {
            b.push(pos, 100 + pos as u32, &[pos as f32, 1.0]);
        }
        assert!(
            b.context_before(10).is_none(),
            "rows must reach the key's end"
        );
        assert!(b.context_before(2).is_none(), "no row before the key's end");
        let ctx = b.context_before(6).unwrap();
        assert_eq!(ctx.first_pos, 2);
        assert_eq!(ctx.hidden, vec![2.0, 1.0, 3.0, 1.0, 4.0, 1.0, 5.0, 1.0]);
        // Row 5's next token is the resumed prompt's token 6, not the cached stream's 106.
        let prompt: Vec<u32> = (0..8).map(|i| 200 + i).collect();
        let r = Backlog::from_context(&ctx, &prompt, 2).unwrap();
        assert_eq!((r.first_pos, r.next.clone()), (2, vec![203, 204, 205, 206]));
        assert!(Backlog::from_context(&ctx, &prompt[..6], 2).is_none());
    }

    #[test]
    fn a_backlog_keeps_the_latest_consecutive_rows() {
        let mut b = Backlog::default();
        for pos in 3..8 {
            b.push(pos, pos as u32 * 10, &[pos as f32, 0.5]);
        }
        b.trim(3);
        assert_eq!(b.next.len(), 5, "within twice the bound nothing moves");
        b.trim(2);
        assert_eq!((b.first_pos, b.next.clone()), (6, vec![60, 70]));
        assert_eq!(b.hidden, vec![6.0, 0.5, 7.0, 0.5]);
        b.push(9, 90, &[9.0, 0.5]);
        assert_eq!((b.first_pos, b.next.len()), (9, 1), "a gap starts over");
    }

    fn fixture() -> Qwen35<tensorfold_backend::cpu::CpuBackend> {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/tiny-wrapper-bf16");
        let ck = tensorfold_core::Checkpoint::open(&dir, |_, _| {}).expect("fixture opens");
        Qwen35::load(&ck, Default::default()).expect("fixture binds")
    }

    #[test]
    fn the_heads_state_after_absorbing_in_pieces_between_drafts_equals_absorbing_at_once() {
        let m = fixture();
        let head = m.mtp.as_ref().expect("the fixture has an MTP head");
        let h = m.config.hidden_size;
        // The plain path's taps: (position, token after it, tap) for 12 rows.
        let seq: Vec<u32> = (0..13).map(|i| (i * 37 + 11) % 480).collect();
        let mut slot = m.new_slot();
        let rows: Vec<RowRef> = (0..12).map(|i| RowRef::chain(0, 0, 0, i)).collect();
        let all: Vec<usize> = (0..12).collect();
        let (_, taps) = m
            .forward_taps(&rows, &seq[..12], &mut [&mut slot], &[], &all)
            .unwrap();
        let job = |from: usize, to: usize, drafts: usize| Absorb {
            first_pos: from,
            hidden: taps[from * h..to * h].to_vec(),
            next: seq[from + 1..to + 1].to_vec(),
            drafts,
            sampling: SamplingParams::greedy(),
            min_prob: 0.0,
        };
        // Pieces of 5, 1, 4, 2 rows, drafting chains of up to 3 in between (pending rows, never kept).
        let mut pieces = head.new_slot(&m.backend);
        for (from, to) in [(0, 5), (5, 6), (6, 10), (10, 12)] {
            let (drafts, _) =
                absorb_and_draft(&m, head, &mut [&mut pieces], &[job(from, to, 3)]).unwrap();
            assert_eq!(drafts[0].len(), 3, "min_prob 0 drafts the whole chain");
        }
        let mut whole = head.new_slot(&m.backend);
        let (drafts_whole, _) =
            absorb_and_draft(&m, head, &mut [&mut whole], &[job(0, 12, 3)]).unwrap();
        assert_eq!(pieces.next_pos, Some(12));
        assert_eq!(whole.next_pos, Some(12));
        // The next drafts from both states agree bit for bit (a probe row at position 12).
        let probe = |slot: &mut MtpSlot<_>| {
            let r = [RowRef::chain(0, 12, 0, 0)];
            head.forward(&m, &r, &[5], &taps[11 * h..12 * h], &mut [slot], &[0])
                .unwrap()
                .logits
        };
        let (a, b) = (probe(&mut pieces), probe(&mut whole));
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
        // And the last piece's drafts equal the whole absorb's drafts.
        let mut again = head.new_slot(&m.backend);
        absorb_and_draft(&m, head, &mut [&mut again], &[job(0, 10, 0)]).unwrap();
        let (drafts_last, _) =
            absorb_and_draft(&m, head, &mut [&mut again], &[job(10, 12, 3)]).unwrap();
        assert_eq!(drafts_last, drafts_whole);
    }

    #[test]
    fn probability_is_the_softmax_of_the_tempered_row() {
        let row = [0.0f32, (2.0f32).ln()];
        assert!((probability(&row, 1, 0.0) - 2.0 / 3.0).abs() < 1e-6);
        assert!((probability(&row, 0, 0.0) - 1.0 / 3.0).abs() < 1e-6);
    }
}
