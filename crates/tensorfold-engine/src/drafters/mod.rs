//! Drafters propose windows: trees of guessed tokens that follow a stream's pending token. Whatever they
//! propose, the reply is unchanged (only tokens the target draws itself are kept); they only change speed.

pub mod copy;
pub(crate) mod mtp;

pub use copy::{ContextCopy, CopyConfig};
pub use mtp::{draft_draw, next_drafts, Pick};

/// Draft nodes; `parents[i]` is an earlier node or None for a child of the pending token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DraftTree {
    pub parents: Vec<Option<usize>>,
    pub tokens: Vec<u32>,
}

impl DraftTree {
    pub fn chain(tokens: Vec<u32>) -> Self {
        let parents = (0..tokens.len()).map(|i| i.checked_sub(1)).collect();
        DraftTree { parents, tokens }
    }
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
    /// Drops nodes beyond `max` and any node whose parent is not an earlier node.
    pub fn sanitized(mut self, max: usize) -> Self {
        self.parents.truncate(max);
        self.tokens.truncate(self.parents.len());
        let ok = self
            .parents
            .iter()
            .enumerate()
            .all(|(i, p)| p.is_none_or(|p| p < i));
        if !ok {
            return DraftTree::default();
        }
        self
    }
    /// The node under `parent` carrying `token`, if any.
    pub fn child(&self, parent: Option<usize>, token: u32) -> Option<usize> {
        (0..self.len()).find(|&i| self.parents[i] == parent && self.tokens[i] == token)
    }
    /// Adds `tokens` as a path from the root, sharing existing nodes (a trie); stops at `max` nodes. Returns the
    /// number of tokens of the path now in the tree.
    pub fn insert_path(&mut self, tokens: &[u32], max: usize) -> usize {
        let mut parent = None;
        for (i, &t) in tokens.iter().enumerate() {
            parent = match self.child(parent, t) {
                Some(c) => Some(c),
                None if self.len() < max => {
                    self.parents.push(parent);
                    self.tokens.push(t);
                    Some(self.len() - 1)
                }
                None => return i,
            };
        }
        tokens.len()
    }
    /// How many nodes of one root path match `emitted` (the tokens the target drew after the pending token).
    pub fn matched(&self, emitted: &[u32]) -> usize {
        let mut parent = None;
        for (i, &t) in emitted.iter().enumerate() {
            match self.child(parent, t) {
                Some(c) => parent = Some(c),
                None => return i,
            }
        }
        emitted.len()
    }
}

pub trait Drafter: Send {
    /// Proposes up to `max_nodes` draft tokens after `context` (prompt + reply so far, ending with the pending
    /// token). An empty tree means "not confident": the engine then asks the MTP head, when there is one.
    fn propose(&mut self, context: &[u32], max_nodes: usize) -> DraftTree;
}

/// Builds one drafter per stream.
#[derive(Clone)]
pub struct DrafterFactory(pub std::sync::Arc<dyn Fn() -> Box<dyn Drafter> + Send + Sync>);

impl DrafterFactory {
    pub fn new(f: impl Fn() -> Box<dyn Drafter> + Send + Sync + 'static) -> Self {
        DrafterFactory(std::sync::Arc::new(f))
    }
    /// Context copies with the default thresholds.
    pub fn context_copy() -> Self {
        DrafterFactory::new(|| Box::new(ContextCopy::default()))
    }
    /// Context copies with the given thresholds.
    pub fn context_copy_with(cfg: CopyConfig) -> Self {
        DrafterFactory::new(move || Box::new(ContextCopy::new(cfg.clone())))
    }
    /// No host drafter: every window comes from the MTP head (or stays empty without one).
    pub fn none() -> Self {
        DrafterFactory::new(|| Box::new(NoDrafts))
    }
    pub fn build(&self) -> Box<dyn Drafter> {
        (self.0)()
    }
}

impl std::fmt::Debug for DrafterFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DrafterFactory")
    }
}

/// Never proposes.
pub struct NoDrafts;

impl Drafter for NoDrafts {
    fn propose(&mut self, _context: &[u32], _max_nodes: usize) -> DraftTree {
        DraftTree::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_trees_are_dropped() {
        let t = DraftTree {
            parents: vec![Some(1), None],
            tokens: vec![1, 2],
        };
        assert!(t.sanitized(8).is_empty());
        assert_eq!(DraftTree::chain(vec![1, 2, 3]).sanitized(2).len(), 2);
    }

    #[test]
    fn paths_inserted_into_a_tree_share_their_common_prefix() {
        let mut t = DraftTree::default();
        assert_eq!(t.insert_path(&[1, 2, 3], 16), 3);
        assert_eq!(t.insert_path(&[1, 2, 9, 10], 16), 4);
        assert_eq!(t.len(), 5, "the shared prefix 1, 2 is stored once");
        assert_eq!(t.parents[3], Some(1));
        assert_eq!(t.insert_path(&[4, 5], 6), 1, "the budget stops a path");
        assert_eq!(t.matched(&[1, 2, 9, 7]), 3);
        assert_eq!(t.matched(&[8]), 0);
    }
}
