//! Context copies: an index over the stream's tokens (prompt and reply) finds earlier occurrences of the recent
//! suffix and proposes what followed them, only after a confident match, with a window that adapts to what lands.

use super::{DraftTree, Drafter};
use std::collections::HashMap;

/// Thresholds of the copy drafter.
#[derive(Clone, Debug)]
pub struct CopyConfig {
    /// Tokens per index key (every earlier window of this many tokens is indexed).
    pub key_len: usize,
    /// Shortest suffix match a copy may follow (the confidence gate).
    pub min_match: usize,
    /// Shorter match that suffices to resume a copy near where the last one was reading (after a small edit),
    /// and how far from there it may be.
    pub resume_match: usize,
    pub resume_slack: usize,
    /// Longest suffix match worth measuring.
    pub max_match: usize,
    /// Copy window width at start; doubles after a copy lands whole, halves after a broken one.
    pub start_width: usize,
    pub min_width: usize,
    pub max_width: usize,
    /// Consecutive proposals with nothing accepted before the drafter goes quiet, and for how many calls.
    pub quiet_after: usize,
    pub quiet_rounds: usize,
    /// Earlier occurrences with distinct continuations that may form a tree, and nodes per extra branch.
    pub branches: usize,
    pub branch_len: usize,
    /// Most recent occurrences of a key examined per proposal.
    pub scan: usize,
}

impl Default for CopyConfig {
    fn default() -> Self {
        CopyConfig {
            key_len: 3,
            min_match: 6,
            resume_match: 3,
            resume_slack: 8,
            max_match: 64,
            start_width: 8,
            min_width: 2,
            max_width: 64,
            quiet_after: 3,
            quiet_rounds: 16,
            branches: 3,
            branch_len: 4,
            scan: 32,
        }
    }
}

/// The copy drafter of one stream.
pub struct ContextCopy {
    cfg: CopyConfig,
    /// Hash of `key_len` tokens → positions right after each occurrence, oldest first.
    index: HashMap<u64, Vec<u32>>,
    /// Tokens of the context the index has seen (to detect a reused drafter).
    seen: Vec<u32>,
    indexed: usize,
    width: usize,
    misses: usize,
    quiet_left: usize,
    /// The last proposal, the context length it followed and its primary chain length.
    last: Option<(usize, DraftTree, usize)>,
    /// Where the last copy read from: source position `.0` lined up with context length `.1`.
    anchor: Option<(usize, usize)>,
}

impl Default for ContextCopy {
    fn default() -> Self {
        ContextCopy::new(CopyConfig::default())
    }
}

fn key_hash(tokens: &[u32]) -> u64 {
    tokens.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| {
        (h ^ t as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `n` tokens that follow position `e` if the context repeats from there on: past the end of the context the
/// copy continues from its own proposal (a loop of period len − e).
fn continuation(ctx: &[u32], e: usize, n: usize) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(n);
    for i in 0..n {
        let j = e + i;
        let t = if j < ctx.len() {
            ctx[j]
        } else {
            out[j - ctx.len()]
        };
        out.push(t);
    }
    out
}

impl ContextCopy {
    pub fn new(cfg: CopyConfig) -> Self {
        let cfg = CopyConfig {
            key_len: cfg.key_len.max(1),
            min_match: cfg.min_match.max(cfg.key_len.max(1)),
            resume_match: cfg.resume_match.max(cfg.key_len.max(1)),
            ..cfg
        };
        ContextCopy {
            width: cfg.start_width.clamp(1, cfg.max_width.max(1)),
            cfg,
            index: HashMap::new(),
            seen: Vec::new(),
            indexed: 0,
            misses: 0,
            quiet_left: 0,
            last: None,
            anchor: None,
        }
    }

    /// The current copy window width (for tests and stats).
    pub fn width(&self) -> usize {
        self.width
    }

    /// Learns from how much of the last proposal the target drew itself.
    fn learn(&mut self, ctx: &[u32]) {
        let Some((len, tree, primary)) = self.last.take() else {
            return;
        };
        if ctx.len() <= len {
            return;
        }
        let emitted = &ctx[len..];
        let landed = tree.matched(emitted);
        // Whole: nothing the target drew contradicted the copy before its end (a trimmed copy can land whole).
        if landed >= primary || landed == emitted.len() {
            self.width = (self.width * 2).min(self.cfg.max_width.max(1));
        } else {
            self.width = (self.width / 2).max(self.cfg.min_width.max(1));
        }
        if landed == 0 {
            self.misses += 1;
            if self.misses >= self.cfg.quiet_after {
                self.misses = 0;
                self.quiet_left = self.cfg.quiet_rounds;
            }
        } else {
            self.misses = 0;
        }
    }

    /// Indexes every key window whose continuation is known.
    fn index_to(&mut self, ctx: &[u32]) {
        let k = self.cfg.key_len;
        while self.indexed + k < ctx.len() {
            let e = self.indexed + k;
            self.index
                .entry(key_hash(&ctx[self.indexed..e]))
                .or_default()
                .push(e as u32);
            self.indexed += 1;
        }
        self.seen.extend_from_slice(&ctx[self.seen.len()..]);
    }

    /// Earlier occurrences of the suffix as (match length, position after it), longest and latest first.
    fn candidates(&self, ctx: &[u32]) -> Vec<(usize, usize)> {
        let (k, len) = (self.cfg.key_len, ctx.len());
        if len < k {
            return Vec::new();
        }
        let Some(ends) = self.index.get(&key_hash(&ctx[len - k..])) else {
            return Vec::new();
        };
        let mut found: Vec<(usize, usize)> = ends
            .iter()
            .rev()
            .take(self.cfg.scan)
            .filter_map(|&e| {
                let e = e as usize;
                let m = (0..self.cfg.max_match.min(e))
                    .take_while(|&i| ctx[e - 1 - i] == ctx[len - 1 - i])
                    .count();
                let resumes = self.anchor.is_some_and(|(src, at)| {
                    len - at <= 4 * self.cfg.max_width.max(1)
                        && e.abs_diff(src + (len - at)) <= self.cfg.resume_slack
                });
                let gate = if resumes {
                    self.cfg.resume_match
                } else {
                    self.cfg.min_match
                };
                (m >= gate).then_some((m, e))
            })
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        found
    }
}

impl Drafter for ContextCopy {
    fn propose(&mut self, context: &[u32], max_nodes: usize) -> DraftTree {
        if context.len() < self.seen.len() || !context.starts_with(&self.seen) {
            // A new stream reused this drafter: start over.
            *self = ContextCopy::new(self.cfg.clone());
        }
        self.learn(context);
        self.index_to(context);
        if self.quiet_left > 0 {
            self.quiet_left -= 1;
            return DraftTree::default();
        }
        if max_nodes == 0 {
            return DraftTree::default();
        }
        let found = self.candidates(context);
        let Some(&(_, best)) = found.first() else {
            return DraftTree::default();
        };
        let primary = self.width.min(max_nodes);
        let mut tree = DraftTree::default();
        tree.insert_path(&continuation(context, best, primary), max_nodes);
        // Other occurrences that continue differently become short branches where they diverge.
        let mut used = vec![continuation(context, best, primary)];
        for &(_, e) in found.iter().skip(1) {
            if used.len() >= self.cfg.branches || tree.len() >= max_nodes {
                break;
            }
            let alt = continuation(context, e, primary);
            if used.contains(&alt) {
                continue;
            }
            let shared = tree.matched(&alt);
            let end = (shared + self.cfg.branch_len).min(alt.len());
            tree.insert_path(&alt[..end], max_nodes);
            used.push(alt);
        }
        self.last = Some((context.len(), tree.clone(), primary));
        self.anchor = Some((best, context.len()));
        tree
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CopyConfig {
        CopyConfig {
            key_len: 3,
            min_match: 3,
            start_width: 4,
            ..CopyConfig::default()
        }
    }

    #[test]
    fn a_copy_proposes_what_followed_the_longest_earlier_match_of_the_suffix() {
        let mut d = ContextCopy::new(cfg());
        let ctx = [1, 2, 3, 4, 5, 9, 8, 7, 1, 2, 3];
        assert_eq!(d.propose(&ctx, 3), DraftTree::chain(vec![4, 5, 9]));
        let mut d = ContextCopy::new(cfg());
        assert_eq!(d.propose(&[7, 8], 3), DraftTree::default());
    }

    #[test]
    fn a_match_shorter_than_the_minimum_proposes_nothing() {
        let mut d = ContextCopy::new(CopyConfig {
            min_match: 5,
            ..cfg()
        });
        assert!(d.propose(&[9, 1, 2, 3, 4, 6, 1, 2, 3], 4).is_empty());
        let mut d = ContextCopy::new(CopyConfig {
            min_match: 5,
            ..cfg()
        });
        let ctx = [7, 8, 1, 2, 3, 4, 6, 7, 8, 1, 2, 3];
        assert_eq!(d.propose(&ctx, 2), DraftTree::chain(vec![4, 6]));
    }

    #[test]
    fn the_window_widens_after_a_whole_copy_lands_and_narrows_after_a_broken_one() {
        let text: Vec<u32> = (1000..1200).collect();
        let mut ctx: Vec<u32> = text.clone();
        ctx.extend_from_slice(&text[..10]);
        let mut d = ContextCopy::new(cfg());
        let w0 = d.width();
        let t = d.propose(&ctx, 64);
        assert_eq!(t.len(), w0);
        // The target drew the whole copy and one more token.
        let n = ctx.len() - 200;
        ctx.extend_from_slice(&text[n..n + w0 + 1]);
        let t = d.propose(&ctx, 64);
        assert_eq!(d.width(), 2 * w0);
        assert_eq!(t.len(), 2 * w0);
        // Only three tokens land, then a different token.
        let n = ctx.len() - 200;
        ctx.extend_from_slice(&text[n..n + 3]);
        ctx.push(999);
        d.propose(&ctx, 64);
        assert_eq!(d.width(), w0);
    }

    #[test]
    fn a_copy_resumes_after_a_small_edit_on_a_shorter_match_near_where_it_was_reading() {
        let c = CopyConfig {
            key_len: 3,
            min_match: 6,
            resume_match: 3,
            start_width: 4,
            ..CopyConfig::default()
        };
        let file: Vec<u32> = (100..160).collect();
        let mut ctx = file.clone();
        ctx.extend_from_slice(&file[..8]);
        let mut d = ContextCopy::new(c.clone());
        assert_eq!(
            d.propose(&ctx, 8),
            DraftTree::chain(vec![108, 109, 110, 111])
        );
        // The target writes 108, then an edit (999), then joins the file again: 110, 111, 112.
        ctx.extend_from_slice(&[108, 999, 110, 111, 112]);
        assert_eq!(
            d.propose(&ctx, 8).tokens.first(),
            Some(&113),
            "three matching tokens near the anchor resume the copy"
        );
        let mut fresh = ContextCopy::new(c);
        assert!(
            fresh.propose(&ctx, 8).is_empty(),
            "without the anchor three are not enough"
        );
    }

    #[test]
    fn repeated_misses_make_the_drafter_quiet_for_a_while() {
        let c = CopyConfig {
            quiet_after: 2,
            quiet_rounds: 3,
            ..cfg()
        };
        let mut d = ContextCopy::new(c);
        let mut ctx: Vec<u32> = vec![1, 2, 3, 4, 1, 2, 3];
        let mut proposals = Vec::new();
        for step in 0..6 {
            // Keep repeating the pattern's start but never its continuation.
            proposals.push(d.propose(&ctx, 4).len());
            ctx.extend_from_slice(&[50 + step, 1, 2, 3]);
        }
        assert!(proposals[0] > 0 && proposals[1] > 0, "{proposals:?}");
        assert_eq!(&proposals[2..5], &[0, 0, 0], "quiet after two misses");
        assert!(proposals[5] > 0, "{proposals:?}");
    }

    #[test]
    fn distinct_continuations_of_the_suffix_form_a_tree() {
        let mut d = ContextCopy::new(cfg());
        let ctx = [1, 2, 3, 10, 11, 0, 1, 2, 3, 20, 21, 0, 1, 2, 3];
        let t = d.propose(&ctx, 8);
        assert_eq!(
            t.child(None, 20),
            Some(0),
            "the latest occurrence is the trunk"
        );
        assert!(
            t.child(None, 10).is_some(),
            "the older one is a branch: {t:?}"
        );
        assert_eq!(t.matched(&[10, 11, 0]), 3);
    }

    #[test]
    fn a_loop_is_copied_past_the_end_of_the_context() {
        let mut d = ContextCopy::new(cfg());
        let ctx = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7];
        assert_eq!(
            d.propose(&ctx, 6),
            DraftTree::chain(vec![8, 5, 6, 7, 8, 5]).sanitized(4)
        );
    }
}
