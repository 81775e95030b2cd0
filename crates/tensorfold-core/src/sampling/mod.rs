//! Keyed sampling (DESIGN.md §1): the token at absolute position p depends only on the logits of that row, the
//! request's parameters and hash(seed, p, token id) — never on batch, draft or timing — plus token_sha.

mod edit;
mod keyed;
mod top;

pub use edit::{draw_rows_keyed, edited_row, LogitEdit};
pub use keyed::{keyed_exp, keyed_gumbel, keyed_ln, keyed_total, TOTAL_LANES};
pub use top::{draw_from_top, row_top, top_count, RowTop, TOP_MAX};

use crate::error::{CoreError, Result};
use sha2::{Digest, Sha256};

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means no top-k cut.
    pub top_k: usize,
    /// 1 means no nucleus cut.
    pub top_p: f32,
    /// 0 means no min-p cut.
    pub min_p: f32,
    pub seed: u64,
}

impl SamplingParams {
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
        }
    }

    /// Checks ranges, so a bad request is an error before anything runs.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(CoreError::Invalid(m));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(format!("temperature must be ≥ 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        Ok(())
    }
}

/// The seed of a request that gave none: derived from its prompt so a repeated request repeats its reply.
pub fn seed_from_prompt(prompt_ids: &[u32]) -> u64 {
    let mut h = Sha256::new();
    for id in prompt_ids {
        h.update(id.to_le_bytes());
    }
    let d = h.finalize();
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// How `draw` treats a row, with everything it needs besides the row and the position: a device can run it where
/// the logits are (`Backend::draw_rows`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyedRule {
    /// The first largest logit.
    Greedy,
    /// The keyed Gumbel-max over the whole vocabulary at temperature 1 / inv_t.
    Gumbel { inv_t: f64, seed: u64 },
    /// The keyed Gumbel-max over the top-k ∩ top-p ∩ min-p candidates.
    Cut(Cut),
}

/// A cut draw's parameters (`SamplingParams` with the temperature as 1 / inv_t; top_k 0 = no cut).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cut {
    pub inv_t: f64,
    pub seed: u64,
    pub top_k: usize,
    pub top_p: f32,
    pub min_p: f32,
}

/// One draw of `Backend::draw_rows`: row `row` of the logits, by `rule`, at absolute `position`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowDraw {
    pub row: usize,
    pub rule: KeyedRule,
    pub position: u64,
}

impl SamplingParams {
    /// The rule `draw` applies to a row of `vocab` logits.
    pub fn keyed_rule(&self, vocab: usize) -> KeyedRule {
        if self.temperature == 0.0 || vocab == 1 {
            return KeyedRule::Greedy;
        }
        let cut = self.cut();
        if self.top_k == 0 && self.top_p >= 1.0 && self.min_p <= 0.0 {
            return KeyedRule::Gumbel {
                inv_t: cut.inv_t,
                seed: cut.seed,
            };
        }
        KeyedRule::Cut(cut)
    }

    /// These parameters as a cut (whether or not they cut anything).
    fn cut(&self) -> Cut {
        Cut {
            inv_t: 1.0 / self.temperature.max(f32::MIN_POSITIVE) as f64,
            seed: self.seed,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
        }
    }
}

/// `draw` by its rule: the first largest logit (greedy), or the first largest l·inv_t + keyed noise over the
/// whole row or its cut's candidates. NaN never wins; a row with nothing above −∞ gives token 0.
pub fn draw_keyed(logits: &[f32], rule: KeyedRule, position: u64) -> u32 {
    match rule {
        KeyedRule::Greedy => argmax(logits),
        KeyedRule::Gumbel { inv_t, seed } => {
            let mut best = (f64::NEG_INFINITY, 0u32);
            for (i, &l) in logits.iter().enumerate() {
                if l.is_nan() {
                    continue;
                }
                let v = l as f64 * inv_t + keyed_gumbel(seed, position, i as u32);
                if v > best.0 {
                    best = (v, i as u32);
                }
            }
            best.1
        }
        KeyedRule::Cut(cut) => {
            let ids = cut_candidates(logits, &cut);
            gumbel_max(ids.iter().map(|&i| (i, logits[i as usize])), &cut, position)
        }
    }
}

/// The keyed Gumbel-max over candidates given best first: the first largest l·inv_t + noise, the first
/// candidate when none is above −∞.
pub(crate) fn gumbel_max(
    ranked: impl Iterator<Item = (u32, f32)>,
    cut: &Cut,
    position: u64,
) -> u32 {
    let mut ranked = ranked.peekable();
    let Some(&(first, _)) = ranked.peek() else {
        return 0;
    };
    let mut best = (f64::NEG_INFINITY, first);
    for (id, l) in ranked {
        let v = l as f64 * cut.inv_t + keyed_gumbel(cut.seed, position, id);
        if v > best.0 {
            best = (v, id);
        }
    }
    best.1
}

/// Draws the token at absolute `position` from one row of logits with the keyed rule.
pub fn draw(logits: &[f32], params: &SamplingParams, position: u64) -> u32 {
    draw_keyed(logits, params.keyed_rule(logits.len()), position)
}

/// top_k ∩ top_p ∩ min_p of softmax(logits / T), in order of decreasing logit (ties to the lower id).
/// Always holds at least the most likely token.
pub fn candidates(logits: &[f32], params: &SamplingParams) -> Vec<u32> {
    cut_candidates(logits, &params.cut())
}

/// Ranks best first: the larger logit, ties to the lower id (a total order on the ids that are not NaN).
pub(crate) fn by_rank(logits: &[f32], a: u32, b: u32) -> std::cmp::Ordering {
    let (la, lb) = (logits[a as usize], logits[b as usize]);
    lb.total_cmp(&la).then(a.cmp(&b))
}

/// How many of the `n` best ranks top-p and min-p keep (at least one), walking `logit_at(rank)` best first with
/// probabilities keyed_exp(l·inv_t − max) / total over the whole vocabulary (so they do not depend on the top-k
/// cut); None when `logit_at` runs out of ranks before the walk ends.
pub(crate) fn walk_keep(
    n: usize,
    mut logit_at: impl FnMut(usize) -> Option<f32>,
    cut: &Cut,
    max: f64,
    total: f64,
) -> Option<usize> {
    let mut cumulative = 0.0;
    for rank in 0..n {
        let p = keyed_exp(logit_at(rank)? as f64 * cut.inv_t - max) / total;
        if rank > 0 && (p as f32) < cut.min_p * (1.0 / total) as f32 {
            return Some(rank);
        }
        cumulative += p;
        if cumulative >= cut.top_p as f64 {
            return Some(rank + 1);
        }
    }
    Some(n.max(1))
}

fn cut_candidates(logits: &[f32], cut: &Cut) -> Vec<u32> {
    let by_rank = |a: &u32, b: &u32| by_rank(logits, *a, *b);
    let mut ids: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| !logits[i as usize].is_nan())
        .collect();
    if ids.is_empty() {
        return vec![0];
    }
    let whole = !(cut.top_k > 0 && cut.top_k < ids.len());
    if !whole {
        ids.select_nth_unstable_by(cut.top_k - 1, by_rank);
        ids.truncate(cut.top_k);
    }
    // The walk below needs ranks only up to the cut: grow a sorted prefix (select the next best ids from the rest,
    // sort just those) rather than sort the whole vocabulary (248,320 ids took 40 ms on the dev machine). by_rank
    // is a total order, so every prefix is exactly the full sort's.
    let n = ids.len();
    let mut sorted = 0usize;
    // `grow(ids, sorted, need, exact)` sorts at least the best `need`: exactly that many when `exact`, else eight
    // times the prefix so far, and the whole rest once that would pass an eighth of the list (a few selections
    // when the cut comes early, about one full sort when it comes late).
    let grow = |ids: &mut [u32], sorted: &mut usize, need: usize, exact: bool| {
        if need <= *sorted {
            return;
        }
        let m = if exact {
            need.min(ids.len())
        } else {
            let m = need.max(8 * *sorted).max(64);
            if m > ids.len() / 8 {
                ids.len()
            } else {
                m
            }
        };
        let rest = &mut ids[*sorted..];
        if m - *sorted < rest.len() {
            rest.select_nth_unstable_by(m - *sorted - 1, by_rank);
        }
        rest[..m - *sorted].sort_unstable_by(by_rank);
        *sorted = m;
    };
    grow(&mut ids, &mut sorted, 1, false);
    let max = logits[ids[0] as usize] as f64 * cut.inv_t;
    let total = keyed_total(logits, cut.inv_t, max);
    if whole && cut.top_p < 1.0 {
        // Sort at once about as many ranks as the top-p cut will walk (the walk grows the prefix if that falls
        // short, so this only saves work).
        let need = top_p_ranks(logits, cut.inv_t, max, cut.top_p as f64 * total);
        grow(&mut ids, &mut sorted, need + need / 16 + 64, true);
    }
    let keep = walk_keep(
        n,
        |rank| {
            grow(&mut ids, &mut sorted, rank + 1, false);
            Some(logits[ids[rank] as usize])
        },
        cut,
        max,
        total,
    )
    .expect("the host has every rank");
    ids.truncate(keep);
    ids
}

/// About how many of the best ranks hold `mass` of exp(l·inv_t − max): from a histogram of l·inv_t below `max`
/// in bins of 1/16, each bin weighed at its middle.
fn top_p_ranks(logits: &[f32], inv_t: f64, max: f64, mass: f64) -> usize {
    const PER_UNIT: f64 = 16.0;
    let mut count = [0usize; 1024];
    for &l in logits {
        let b = ((max - l as f64 * inv_t) * PER_UNIT) as usize; // NaN → 0, −∞ → usize::MAX
        if b < count.len() && !l.is_nan() {
            count[b] += 1;
        }
    }
    let (mut ranks, mut seen) = (0usize, 0.0f64);
    for (b, &c) in count.iter().enumerate() {
        ranks += c;
        seen += c as f64 * (-(b as f64 + 0.5) / PER_UNIT).exp();
        if seen >= mass {
            return ranks;
        }
    }
    logits.len()
}

/// Index of the largest logit; ties go to the lower id; NaN never wins.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best as u32
}

/// First 12 hex digits of SHA-256 over the comma-joined decimal token ids: the currency of every equality check.
pub fn token_sha(ids: &[u32]) -> String {
    let joined = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let digest = Sha256::digest(joined.as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampled(seed: u64) -> SamplingParams {
        SamplingParams {
            temperature: 0.8,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
        }
    }

    #[test]
    fn keyed_rules_are_greedy_gumbel_or_cut_by_the_parameters() {
        assert_eq!(SamplingParams::greedy().keyed_rule(10), KeyedRule::Greedy);
        assert_eq!(sampled(3).keyed_rule(1), KeyedRule::Greedy);
        assert_eq!(
            sampled(3).keyed_rule(10),
            KeyedRule::Gumbel {
                inv_t: 1.0 / 0.8f32 as f64,
                seed: 3
            }
        );
        let cut = SamplingParams {
            top_p: 0.9,
            ..sampled(3)
        };
        assert_eq!(
            cut.keyed_rule(10),
            KeyedRule::Cut(Cut {
                inv_t: 1.0 / 0.8f32 as f64,
                seed: 3,
                top_k: 0,
                top_p: 0.9,
                min_p: 0.0
            })
        );
        let row = [0.5f32, f32::NAN, 2.0, 2.0, -1.0];
        assert_eq!(draw_keyed(&row, KeyedRule::Greedy, 0), 2);
        assert_eq!(draw_keyed(&[f32::NEG_INFINITY; 3], KeyedRule::Greedy, 0), 0);
        let all_nan = [f32::NAN; 4];
        assert_eq!(draw_keyed(&all_nan, sampled(1).keyed_rule(4), 9), 0);
        assert_eq!(draw_keyed(&all_nan, cut.keyed_rule(4), 9), 0);
    }

    #[test]
    fn greedy_ties_go_to_the_lower_id() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(draw(&[0.5, 0.5], &SamplingParams::greedy(), 7), 0);
    }

    #[test]
    fn token_sha_is_sha256_of_comma_joined_ids() {
        // sha256("1,2,3") = 8a6ae15122...; checked with `printf 1,2,3 | sha256sum`.
        assert_eq!(token_sha(&[1, 2, 3]), "8a6ae1512200");
        assert_eq!(token_sha(&[]).len(), 12);
    }

    #[test]
    fn the_same_key_draws_the_same_token_and_positions_differ() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.1).collect();
        let a: Vec<u32> = (0..40).map(|p| draw(&logits, &sampled(5), p)).collect();
        let b: Vec<u32> = (0..40).map(|p| draw(&logits, &sampled(5), p)).collect();
        assert_eq!(a, b);
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert!(
            distinct.len() > 3,
            "keyed draws should vary across positions: {a:?}"
        );
        let c: Vec<u32> = (0..40).map(|p| draw(&logits, &sampled(6), p)).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn keyed_draws_follow_the_softmax_distribution() {
        let logits = [0.0f32, (2.0f32).ln(), (3.0f32).ln()];
        let params = SamplingParams {
            temperature: 1.0,
            ..sampled(1)
        };
        let mut counts = [0usize; 3];
        let n = 30_000;
        for p in 0..n {
            counts[draw(&logits, &params, p) as usize] += 1;
        }
        for (i, expect) in [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0].iter().enumerate() {
            let got = counts[i] as f64 / n as f64;
            assert!((got - expect).abs() < 0.015, "token {i}: {got} vs {expect}");
        }
    }

    /// `candidates` as it was before ranks were sorted lazily: the whole list sorted, then walked.
    fn candidates_by_full_sort(logits: &[f32], params: &SamplingParams) -> Vec<u32> {
        let by_rank = |a: &u32, b: &u32| {
            let (la, lb) = (logits[*a as usize], logits[*b as usize]);
            lb.total_cmp(&la).then(a.cmp(b))
        };
        let mut ids: Vec<u32> = (0..logits.len() as u32)
            .filter(|&i| !logits[i as usize].is_nan())
            .collect();
        if ids.is_empty() {
            return vec![0];
        }
        if params.top_k > 0 && params.top_k < ids.len() {
            ids.select_nth_unstable_by(params.top_k - 1, by_rank);
            ids.truncate(params.top_k);
        }
        ids.sort_unstable_by(by_rank);
        let inv_t = 1.0 / params.temperature.max(f32::MIN_POSITIVE) as f64;
        let max = logits[ids[0] as usize] as f64 * inv_t;
        let total: f64 = logits
            .iter()
            .filter(|l| !l.is_nan())
            .map(|&l| (l as f64 * inv_t - max).exp())
            .sum();
        let mut keep = ids.len();
        let mut cumulative = 0.0;
        for (rank, &id) in ids.iter().enumerate() {
            let p = (logits[id as usize] as f64 * inv_t - max).exp() / total;
            if rank > 0 && (p as f32) < params.min_p * (1.0 / total) as f32 {
                keep = rank;
                break;
            }
            cumulative += p;
            if cumulative >= params.top_p as f64 {
                keep = rank + 1;
                break;
            }
        }
        ids.truncate(keep.max(1));
        ids
    }

    proptest::proptest! {
        #[test]
        fn lazily_sorted_candidates_equal_the_fully_sorted_ones(
            raw in proptest::collection::vec(-40i32..40, 1..700),
            nan_every in 0usize..9,
            top_k in 0usize..200,
            top_p in 0.05f32..1.0,
            min_p in 0.0f32..0.2,
            temperature in 0.1f32..3.0,
        ) {
            // Coarse values, so ties are common; a NaN every few ids.
            let logits: Vec<f32> = raw
                .iter()
                .enumerate()
                .map(|(i, &v)| if nan_every > 0 && i % (nan_every + 3) == 0 { f32::NAN } else { v as f32 * 0.25 })
                .collect();
            for (top_k, top_p, min_p) in [(top_k, top_p, min_p), (0, top_p, min_p), (0, top_p, 0.0), (top_k, 1.0, min_p)] {
                let p = SamplingParams { temperature, top_k, top_p, min_p, seed: 0 };
                proptest::prop_assert_eq!(candidates(&logits, &p), candidates_by_full_sort(&logits, &p));
            }
        }
    }

    #[test]
    fn top_k_top_p_and_min_p_cut_the_candidates() {
        let logits = [4.0f32, 3.0, 2.0, 1.0, 0.0];
        let p = |top_k, top_p, min_p| SamplingParams {
            temperature: 1.0,
            top_k,
            top_p,
            min_p,
            seed: 0,
        };
        assert_eq!(candidates(&logits, &p(2, 1.0, 0.0)), vec![0, 1]);
        // softmax: 0.636, 0.234, 0.086, ... → top_p 0.8 keeps two.
        assert_eq!(candidates(&logits, &p(0, 0.8, 0.0)), vec![0, 1]);
        // min_p 0.2: keep p ≥ 0.127 → two.
        assert_eq!(candidates(&logits, &p(0, 1.0, 0.2)), vec![0, 1]);
        assert_eq!(candidates(&logits, &p(0, 0.01, 0.0)), vec![0]);
        for pos in 0..200 {
            assert!(draw(&logits, &p(2, 1.0, 0.0), pos) < 2);
        }
    }

    #[test]
    fn invalid_parameters_are_refused() {
        assert!(SamplingParams {
            temperature: -1.0,
            ..sampled(0)
        }
        .validate()
        .is_err());
        assert!(SamplingParams {
            top_p: 0.0,
            ..sampled(0)
        }
        .validate()
        .is_err());
        assert!(SamplingParams {
            min_p: 2.0,
            ..sampled(0)
        }
        .validate()
        .is_err());
        assert!(sampled(0).validate().is_ok());
    }
}
