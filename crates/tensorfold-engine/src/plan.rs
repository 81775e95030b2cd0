//! Window planning: how wide a stream's next window is (copy or MTP drafts), chosen from measured round costs and
//! how the stream's drafts land to maximise expected tokens per second; probes for idle sources; the round cap.

use crate::drafters::mtp::Backlog;
use crate::drafters::DraftTree;

/// Round costs are measured per total row count up to this many rows.
const MEASURED_ROWS: usize = 512;
/// Weight of a new measurement in the moving averages.
const EMA: f64 = 0.25;

/// How a stream's drafts land, as a geometric model: each draft is accepted with probability `rate()` given that
/// the ones before it were. Counts decay so the estimate follows the text.
#[derive(Clone, Debug)]
pub(crate) struct Acceptance {
    accepted: f64,
    rejected: f64,
}

impl Default for Acceptance {
    /// An even prior worth two windows.
    fn default() -> Self {
        Acceptance {
            accepted: 1.0,
            rejected: 1.0,
        }
    }
}

impl Acceptance {
    /// A prior worth `accepted` accepted drafts and `rejected` rejections.
    pub fn with_prior(accepted: f64, rejected: f64) -> Self {
        Acceptance { accepted, rejected }
    }
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.accepted = 0.9 * self.accepted + accepted as f64;
        self.rejected = 0.9 * self.rejected + f64::from(u8::from(accepted < drafted));
    }
    /// Maximum-likelihood per-draft acceptance of the geometric model.
    pub fn rate(&self) -> f64 {
        self.accepted / (self.accepted + self.rejected).max(1e-9)
    }
    /// A prior for a new stream: this estimate's rate, worth a few windows.
    pub fn as_prior(&self) -> Acceptance {
        let r = self.rate();
        Acceptance::with_prior(4.0 * r, 4.0 * (1.0 - r))
    }
}

/// Measured costs of this engine's rounds (on its device and model shape).
#[derive(Debug)]
pub(crate) struct Planner {
    /// Moving average of a round's forward time by its row count.
    round_secs: Vec<Option<f64>>,
    /// Moving average of one chained MTP step.
    mtp_step_secs: Option<f64>,
    /// How drafts of each source land across streams: a new stream starts from these.
    pub copy_accept: Acceptance,
    pub mtp_accept: Acceptance,
}

impl Default for Planner {
    fn default() -> Self {
        Planner {
            round_secs: vec![None; MEASURED_ROWS + 1],
            mtp_step_secs: None,
            // A confident copy is usually right (the original system measured 94%).
            copy_accept: Acceptance::with_prior(9.0, 1.0),
            mtp_accept: Acceptance::default(),
        }
    }
}

fn ema(slot: &mut Option<f64>, x: f64) {
    *slot = Some(slot.map_or(x, |old| old + EMA * (x - old)));
}

impl Planner {
    pub fn record_round(&mut self, rows: usize, secs: f64) {
        if (1..=MEASURED_ROWS).contains(&rows) {
            ema(&mut self.round_secs[rows], secs);
        }
    }

    pub fn record_mtp_step(&mut self, secs: f64) {
        ema(&mut self.mtp_step_secs, secs);
    }

    /// Estimated seconds of a round of `rows` rows: never less than a measured round of fewer rows (noise must
    /// not make a wider round look cheaper), else measured, interpolated between measured neighbours, or extended
    /// from the nearest (flat when nothing says otherwise, so untried widths get tried).
    pub fn round_cost(&self, rows: usize) -> Option<f64> {
        let rows = rows.clamp(1, MEASURED_ROWS);
        let floor = self.round_secs[1..rows]
            .iter()
            .flatten()
            .copied()
            .fold(0.0, f64::max);
        self.estimate(rows).map(|c| c.max(floor))
    }

    fn estimate(&self, rows: usize) -> Option<f64> {
        if let Some(c) = self.round_secs[rows] {
            return Some(c);
        }
        let below = (1..rows)
            .rev()
            .find_map(|r| self.round_secs[r].map(|c| (r, c)));
        let above = (rows + 1..=MEASURED_ROWS).find_map(|r| self.round_secs[r].map(|c| (r, c)));
        match (below, above) {
            (Some((r0, c0)), Some((r1, c1))) => {
                Some(c0 + (c1 - c0) * (rows - r0) as f64 / (r1 - r0) as f64)
            }
            (Some((r0, c0)), None) => {
                let before = (1..r0)
                    .rev()
                    .find_map(|r| self.round_secs[r].map(|c| (r, c)));
                let slope = before.map_or(0.0, |(r, c)| ((c0 - c) / (r0 - r) as f64).max(0.0));
                Some(c0 + slope * (rows - r0) as f64)
            }
            (None, Some((_, c1))) => Some(c1),
            (None, None) => None,
        }
    }

    /// Measured seconds of one MTP head call (0 until measured).
    pub fn mtp_step(&self) -> f64 {
        self.mtp_step_secs.unwrap_or(0.0)
    }

    /// Drafts (0..=max) for a stream whose drafts land at rate `a`, in a round that also carries `others` other
    /// windows, when drafting costs `step` seconds per draft: the width that maximises expected tokens of the
    /// round per second of round and drafting.
    pub fn width(&self, a: f64, others: usize, max: usize, step: f64) -> usize {
        let a = a.clamp(0.0, 0.999);
        let mut best = (0usize, f64::MIN);
        let mut expected = 0.0;
        for w in 0..=max {
            // Tokens this window yields on average: 1 + a + … + a^w.
            expected += a.powi(w as i32);
            let Some(cost) = self.round_cost(others + 1 + w) else {
                return max;
            };
            // (The MTP head runs once to absorb the kept rows and once per further chained draft.)
            let secs = cost + step * w as f64;
            let rate = (others as f64 + expected) / secs.max(1e-12);
            if rate > best.1 * (1.0 + 1e-9) {
                best = (w, rate);
            }
        }
        best.0
    }
}

/// Per-stream drafting state the planner reads and the rounds update.
pub(crate) struct Drafting {
    pub copy_accept: Acceptance,
    pub mtp_accept: Acceptance,
    /// The latest kept rows, absorbed or not: those from `absorbed` on wait for the head (it absorbs only while it
    /// drafts for this stream), and a prompt-cache snapshot stores them as the head's context.
    pub latest: Backlog,
    /// First position the head has not absorbed.
    pub absorbed: usize,
    /// When the planner last let a copy, or the head, draft (a probe follows after a while).
    pub copy_idle: Idle,
    pub mtp_idle: Idle,
}

impl Drafting {
    /// A new stream's state, its acceptance priors taken from how drafts landed for earlier streams; a stream
    /// resumed from the prompt cache brings the head's cached rows before its resume point (absorbed first).
    pub fn new(planner: &Planner, context: Option<Backlog>) -> Self {
        Drafting {
            copy_accept: planner.copy_accept.as_prior(),
            mtp_accept: planner.mtp_accept.as_prior(),
            latest: context.unwrap_or_default(),
            absorbed: 0,
            copy_idle: Idle::default(),
            mtp_idle: Idle::default(),
        }
    }
}

/// Windows a source sits out before one probe window re-measures how its drafts land; each probe that does not
/// bring the source back doubles the wait, up to `PROBE_MAX`.
const PROBE_EVERY: usize = 16;
const PROBE_MAX: usize = 256;

/// How long a source has sat out, and how long it waits before the next probe.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Idle {
    windows: usize,
    wait: usize,
}

impl Default for Idle {
    fn default() -> Self {
        Idle {
            windows: 0,
            wait: PROBE_EVERY,
        }
    }
}

impl Idle {
    /// The planned width, or after a long enough wait at zero a probe of `probe_width`.
    pub fn width(&mut self, planned: usize, probe_width: usize) -> usize {
        if planned > 0 {
            *self = Idle::default();
            return planned;
        }
        self.windows += 1;
        if self.windows < self.wait {
            return 0;
        }
        self.windows = 0;
        self.wait = (self.wait * 2).min(PROBE_MAX);
        probe_width
    }
}

/// Trims the windows' draft trees so that all windows together hold at most `max_rows` rows (each window's
/// pending row included), sharing the budget evenly and giving what a small tree leaves to the larger ones.
pub(crate) fn cap_trees(trees: &mut [Option<DraftTree>], max_rows: usize) {
    let windows = trees.iter().filter(|t| t.is_some()).count();
    let mut budget = max_rows.saturating_sub(windows);
    let total: usize = trees.iter().flatten().map(|t| t.len()).sum();
    if total <= budget {
        return;
    }
    let mut order: Vec<usize> = (0..trees.len()).filter(|&i| trees[i].is_some()).collect();
    order.sort_by_key(|&i| trees[i].as_ref().map_or(0, |t| t.len()));
    let mut left = order.len();
    for i in order {
        let share = budget / left.max(1);
        if let Some(t) = trees[i].take() {
            let keep = t.len().min(share);
            budget -= keep;
            trees[i] = Some(t.sanitized(keep));
        }
        left -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_rounds_are_capped_evenly_and_small_windows_leave_room_to_large_ones() {
        let chain = |n: usize| Some(DraftTree::chain((0..n as u32).collect()));
        let mut trees = vec![chain(2), chain(10), None, chain(10)];
        cap_trees(&mut trees, 15);
        let lens: Vec<_> = trees.iter().map(|t| t.as_ref().map(|t| t.len())).collect();
        assert_eq!(lens, vec![Some(2), Some(5), None, Some(5)]);
        let mut small = vec![chain(3), chain(4)];
        cap_trees(&mut small, 64);
        assert_eq!(
            small[1].as_ref().map(|t| t.len()),
            Some(4),
            "under the cap nothing changes"
        );
    }

    #[test]
    fn widths_follow_acceptance_and_measured_costs() {
        let mut p = Planner::default();
        assert_eq!(p.width(0.5, 0, 6, 0.0), 6, "unmeasured: try the widest");
        // Rows cost in proportion to their count: a draft pays only if it is nearly always accepted.
        for r in 1..=8 {
            p.record_round(r, r as f64);
        }
        assert_eq!(p.width(0.3, 0, 6, 0.0), 0);
        // Flat costs (bandwidth-bound decode): drafting pays even at modest acceptance.
        let mut flat = Planner::default();
        for r in 1..=8 {
            flat.record_round(r, 1.0);
        }
        assert_eq!(flat.width(0.3, 0, 6, 0.0), 6);
        flat.record_mtp_step(0.5);
        assert!(
            flat.width(0.3, 0, 6, flat.mtp_step()) < 6,
            "expensive drafting steps shorten chains"
        );
    }

    #[test]
    fn acceptance_follows_recent_windows() {
        let mut a = Acceptance::default();
        for _ in 0..30 {
            a.record(4, 4);
        }
        assert!(a.rate() > 0.9);
        for _ in 0..60 {
            a.record(4, 0);
        }
        assert!(a.rate() < 0.1);
    }
}
