//! Drafters propose windows: trees of guessed tokens that follow a stream's pending token. Whatever they
//! propose, the reply is unchanged (only tokens the target draws itself are kept); they only change speed.

use std::collections::HashMap;

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
}

pub trait Drafter: Send {
    /// Proposes up to `max_nodes` draft tokens after `context` (prompt + reply so far, ending with the pending
    /// token).
    fn propose(&mut self, context: &[u32], max_nodes: usize) -> DraftTree;
}

/// Builds one drafter per stream.
#[derive(Clone)]
pub struct DrafterFactory(pub std::sync::Arc<dyn Fn() -> Box<dyn Drafter> + Send + Sync>);

impl DrafterFactory {
    pub fn new(f: impl Fn() -> Box<dyn Drafter> + Send + Sync + 'static) -> Self {
        DrafterFactory(std::sync::Arc::new(f))
    }
    pub fn context_copy() -> Self {
        DrafterFactory::new(|| Box::new(ContextCopy::default()))
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

/// Context copies: finds the longest earlier occurrence of the context's suffix and proposes what followed it.
#[derive(Default)]
pub struct ContextCopy {
    /// Suffix n-gram (of `NGRAM` tokens) → last position after it.
    index: HashMap<[u32; NGRAM], usize>,
    indexed: usize,
}

const NGRAM: usize = 3;

impl Drafter for ContextCopy {
    fn propose(&mut self, context: &[u32], max_nodes: usize) -> DraftTree {
        if context.len() < self.indexed {
            // A new stream reused this drafter: start over.
            *self = ContextCopy::default();
        }
        // Index every n-gram that ends before the current suffix.
        while self.indexed + NGRAM < context.len() {
            let start = self.indexed;
            let mut key = [0u32; NGRAM];
            key.copy_from_slice(&context[start..start + NGRAM]);
            self.index.insert(key, start + NGRAM);
            self.indexed += 1;
        }
        if context.len() < NGRAM || max_nodes == 0 {
            return DraftTree::default();
        }
        let mut key = [0u32; NGRAM];
        key.copy_from_slice(&context[context.len() - NGRAM..]);
        match self.index.get(&key) {
            Some(&after) => {
                let end = (after + max_nodes).min(context.len());
                DraftTree::chain(context[after..end].to_vec())
            }
            None => DraftTree::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_copy_proposes_what_followed_the_last_occurrence_of_the_suffix() {
        let mut d = ContextCopy::default();
        let ctx = [1, 2, 3, 4, 5, 9, 1, 2, 3];
        assert_eq!(d.propose(&ctx, 3), DraftTree::chain(vec![4, 5, 9]));
        assert_eq!(d.propose(&[7, 8], 3), DraftTree::default());
    }

    #[test]
    fn malformed_trees_are_dropped() {
        let t = DraftTree {
            parents: vec![Some(1), None],
            tokens: vec![1, 2],
        };
        assert!(t.sanitized(8).is_empty());
        assert_eq!(DraftTree::chain(vec![1, 2, 3]).sanitized(2).len(), 2);
    }
}
