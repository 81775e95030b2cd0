//! The prompt cache: snapshots of a slot's committed state keyed by the tokens that produced it, evicted under a
//! byte budget, a reply's end before any prompt's own. A resumed request equals a fresh one because a snapshot is
//! the exact state; the MTP head's recent context rides along so a resumed stream drafts as well as a cold one.

use tensorfold_model::SlotSnapshot;

/// The cache of slot snapshots the engine keeps.
pub type PromptCache<B> = SnapshotCache<SlotSnapshot<B>>;

/// Where a snapshot was taken, which decides what it can serve and so which goes first when space runs out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotKind {
    /// Inside a prompt (one row before its end, or every `cache_every` tokens): serves the same prompt again and
    /// every conversation that extends it.
    Prompt,
    /// At the end of a reply: serves only a follow-up that repeats the reply token for token (chat templates that
    /// drop earlier turns' reasoning do not), and saves only the reply's own prefill beyond the prompt's snapshot.
    ReplyEnd,
}

/// The head's view of the rows just before a snapshot's end: the taps of rows `first_pos..len` (`[rows, hidden]`).
/// The token after each row is the resumed request's own (the last one lies past the key), so it is not stored.
#[derive(Clone, Debug, Default)]
pub struct HeadContext {
    pub first_pos: usize,
    pub hidden: Vec<f32>,
}

struct Entry<S> {
    tokens: Vec<u32>,
    snap: S,
    head: Option<HeadContext>,
    bytes: usize,
    last_used: u64,
    kind: SnapshotKind,
    /// Whether a lookup has resumed from it: a reply's end that served a follow-up has shown it is worth a prompt's.
    hit: bool,
}

impl<S> Entry<S> {
    /// Eviction order, least first: reply ends never resumed from, then everything else, each by last use. Under a
    /// burst the replies end after their prompts were snapshotted, so a plain LRU evicted the prompts' snapshots
    /// first (call 138: 16 prompts, 15 snapshots' room, no prompt's own left).
    fn keep_rank(&self) -> (bool, u64) {
        (
            self.kind == SnapshotKind::Prompt || self.hit,
            self.last_used,
        )
    }
}

/// Snapshots (of type `S`: a slot's, in the engine) keyed by their tokens, within a byte budget.
pub struct SnapshotCache<S> {
    entries: Vec<Entry<S>>,
    budget: usize,
    used: usize,
    clock: u64,
}

impl<S> SnapshotCache<S> {
    pub fn new(budget: usize) -> Self {
        SnapshotCache {
            entries: Vec::new(),
            budget,
            used: 0,
            clock: 0,
        }
    }
    pub fn enabled(&self) -> bool {
        self.budget > 0
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Bytes the snapshots hold.
    pub fn used(&self) -> usize {
        self.used
    }

    /// The snapshot of the longest cached prefix of `prompt` that leaves at least one prompt row to run, with the
    /// head's context when one was stored.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<(&S, Option<&HeadContext>)> {
        self.clock += 1;
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.tokens.len() < prompt.len() && prompt.starts_with(&e.tokens))
            .max_by_key(|(_, e)| e.tokens.len())
            .map(|(i, _)| i)?;
        self.entries[best].last_used = self.clock;
        self.entries[best].hit = true;
        let e = &self.entries[best];
        Some((&e.snap, e.head.as_ref()))
    }

    /// Whether `tokens` is already cached (no need to snapshot again).
    pub fn contains(&self, tokens: &[u32]) -> bool {
        self.entries.iter().any(|e| e.tokens == tokens)
    }

    /// Stores a snapshot (`bytes` its size; the head context's is added), evicting entries in `keep_rank`
    /// order to stay within budget.
    pub fn insert(
        &mut self,
        tokens: Vec<u32>,
        snap: S,
        head: Option<HeadContext>,
        bytes: usize,
        kind: SnapshotKind,
    ) {
        let bytes = bytes + head.as_ref().map_or(0, |h| 4 * h.hidden.len());
        if bytes > self.budget || tokens.is_empty() || self.contains(&tokens) {
            return;
        }
        while self.used + bytes > self.budget {
            let Some(lru) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.keep_rank())
                .map(|(i, _)| i)
            else {
                break;
            };
            let e = self.entries.swap_remove(lru);
            self.used -= e.bytes;
        }
        self.clock += 1;
        self.used += bytes;
        self.entries.push(Entry {
            tokens,
            snap,
            head,
            bytes,
            last_used: self.clock,
            kind,
            hit: false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{SnapshotCache, SnapshotKind};

    fn cache_of(entries: &[(&[u32], SnapshotKind)], budget: usize) -> SnapshotCache<()> {
        let mut c = SnapshotCache::new(budget);
        for (tokens, kind) in entries {
            c.insert(tokens.to_vec(), (), None, 10, *kind);
        }
        c
    }

    #[test]
    fn a_reply_end_is_evicted_before_an_older_prompt_snapshot() {
        use SnapshotKind::*;
        // Room for two: the burst's first prompt, its reply's end, then a second prompt.
        let c = cache_of(
            &[
                (&[1, 2], Prompt),
                (&[1, 2, 3, 4], ReplyEnd),
                (&[7, 8], Prompt),
            ],
            20,
        );
        assert!(c.contains(&[1, 2]), "the older prompt snapshot stays");
        assert!(!c.contains(&[1, 2, 3, 4]), "the reply end goes first");
        assert!(c.contains(&[7, 8]));
        assert_eq!(c.used(), 20);
    }

    #[test]
    fn reply_ends_go_least_recently_used_first_and_prompts_only_when_none_is_left() {
        use SnapshotKind::*;
        let mut c = cache_of(&[(&[1], Prompt), (&[2], ReplyEnd), (&[3], ReplyEnd)], 30);
        c.insert(vec![4], (), None, 10, Prompt);
        assert!(
            !c.contains(&[2]) && c.contains(&[3]),
            "the older reply end goes"
        );
        c.insert(vec![5], (), None, 10, Prompt);
        assert!(!c.contains(&[3]), "then the other one");
        c.insert(vec![6], (), None, 10, Prompt);
        assert!(
            !c.contains(&[1]) && c.contains(&[4]) && c.contains(&[5]) && c.contains(&[6]),
            "then plain LRU"
        );
        assert_eq!(c.len(), 3);
    }

    #[test]
    fn a_reply_end_that_served_a_follow_up_is_kept_as_a_prompt_snapshot_would_be() {
        use SnapshotKind::*;
        let mut c = cache_of(&[(&[1, 2, 3], ReplyEnd), (&[9], Prompt)], 20);
        let (_, head) = c
            .lookup(&[1, 2, 3, 4, 5])
            .expect("the follow-up resumes from the reply's end");
        assert!(head.is_none());
        // [9] is now the least recently used, and the reply end has earned its place.
        c.insert(vec![8], (), None, 10, Prompt);
        assert!(c.contains(&[1, 2, 3]) && !c.contains(&[9]));
    }

    #[test]
    fn a_lookup_takes_the_longest_prefix_that_leaves_a_prompt_row_to_run() {
        use SnapshotKind::*;
        let mut c = cache_of(
            &[(&[1], Prompt), (&[1, 2], Prompt), (&[1, 2, 3], ReplyEnd)],
            100,
        );
        assert!(c.lookup(&[1, 2, 3]).is_some());
        // [1, 2, 3] would leave no row: [1, 2] serves it.
        let mut d = cache_of(&[(&[1, 2, 3], Prompt)], 100);
        assert!(d.lookup(&[1, 2, 3]).is_none());
        assert!(d.lookup(&[1, 2, 4, 5]).is_none(), "not a prefix");
    }
}
