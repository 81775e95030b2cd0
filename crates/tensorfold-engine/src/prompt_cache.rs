//! The prompt cache: snapshots of a slot's committed state keyed by the tokens that produced it, LRU-evicted
//! under a byte budget. A resumed request equals a fresh one because a snapshot is the exact state; the MTP head's
//! recent context rides along so a resumed stream drafts as well as a cold one.

use tensorfold_backend::Backend;
use tensorfold_model::SlotSnapshot;

/// The head's view of the rows just before a snapshot's end: the taps of rows `first_pos..len` (`[rows, hidden]`).
/// The token after each row is the resumed request's own (the last one lies past the key), so it is not stored.
#[derive(Clone, Debug, Default)]
pub struct HeadContext {
    pub first_pos: usize,
    pub hidden: Vec<f32>,
}

struct Entry<B: Backend> {
    tokens: Vec<u32>,
    snap: SlotSnapshot<B>,
    head: Option<HeadContext>,
    bytes: usize,
    last_used: u64,
}

pub struct PromptCache<B: Backend> {
    entries: Vec<Entry<B>>,
    budget: usize,
    used: usize,
    clock: u64,
}

impl<B: Backend> PromptCache<B> {
    pub fn new(budget: usize) -> Self {
        PromptCache {
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
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<(&SlotSnapshot<B>, Option<&HeadContext>)> {
        self.clock += 1;
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.tokens.len() < prompt.len() && prompt.starts_with(&e.tokens))
            .max_by_key(|(_, e)| e.tokens.len())
            .map(|(i, _)| i)?;
        self.entries[best].last_used = self.clock;
        let e = &self.entries[best];
        Some((&e.snap, e.head.as_ref()))
    }

    /// Whether `tokens` is already cached (no need to snapshot again).
    pub fn contains(&self, tokens: &[u32]) -> bool {
        self.entries.iter().any(|e| e.tokens == tokens)
    }

    /// Stores a snapshot (`bytes` its size; the head context's is added), evicting the least recently used
    /// entries to stay within budget.
    pub fn insert(
        &mut self,
        tokens: Vec<u32>,
        snap: SlotSnapshot<B>,
        head: Option<HeadContext>,
        bytes: usize,
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
                .min_by_key(|(_, e)| e.last_used)
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
        });
    }
}
