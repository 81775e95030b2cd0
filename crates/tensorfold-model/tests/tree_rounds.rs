//! Trees and windows at the model level: every tree row's logits equal, bit for bit, the plain one-row-at-a-time
//! decode of its path, whatever shares the round; keep leaves exactly the state of the plain path.

use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::OnceLock;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::RowRef;
use tensorfold_core::Checkpoint;
use tensorfold_model::{Qwen35, SlotState};

fn model() -> &'static Qwen35<CpuBackend> {
    static M: OnceLock<Qwen35<CpuBackend>> = OnceLock::new();
    M.get_or_init(|| {
        let dir =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-wrapper-bf16");
        let ck = Checkpoint::open(&dir, |_, _| {}).expect("fixture opens");
        Qwen35::load(&ck, CpuBackend::default()).expect("fixture binds")
    })
}

/// Logits after feeding `tokens` one row per round into a fresh slot; one vector per token.
fn plain(m: &Qwen35<CpuBackend>, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut slot = m.new_slot();
    tokens
        .iter()
        .enumerate()
        .map(|(pos, &t)| {
            m.forward_chains(&[RowRef::chain(0, pos, 0, 0)], &[t], &mut [&mut slot], &[0])
                .unwrap()
        })
        .collect()
}

fn prefilled(m: &Qwen35<CpuBackend>, prompt: &[u32]) -> SlotState<CpuBackend> {
    let mut slot = m.new_slot();
    let rows: Vec<RowRef> = (0..prompt.len())
        .map(|i| RowRef::chain(0, 0, 0, i))
        .collect();
    m.forward_chains(&rows, prompt, &mut [&mut slot], &[])
        .unwrap();
    slot
}

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// A tree given as parent links (None = root, else an earlier node) and tokens.
#[derive(Clone, Debug)]
struct Tree {
    parents: Vec<Option<usize>>,
    tokens: Vec<u32>,
}

fn tree_strategy(max_nodes: usize) -> impl Strategy<Value = Tree> {
    (1..=max_nodes).prop_flat_map(|n| {
        let parents = (0..n)
            .map(|i| {
                if i == 0 {
                    Just(None).boxed()
                } else {
                    prop::option::weighted(0.9, 0..i).boxed()
                }
            })
            .collect::<Vec<_>>();
        (parents, prop::collection::vec(0u32..480, n))
            .prop_map(|(parents, tokens)| Tree { parents, tokens })
    })
}

fn path_of(tree: &Tree, node: usize) -> Vec<usize> {
    let mut p = vec![node];
    while let Some(q) = tree.parents[*p.last().unwrap()] {
        p.push(q);
    }
    p.reverse();
    p
}

/// Appends a tree for `slot` (committed length `base`) to a round; returns the round index of each node.
fn push_tree(
    rows: &mut Vec<RowRef>,
    tokens: &mut Vec<u32>,
    slot: usize,
    base: usize,
    tree: &Tree,
) -> Vec<usize> {
    let mut at = Vec::new();
    for (i, &parent) in tree.parents.iter().enumerate() {
        let depth = path_of(tree, i).len() - 1;
        at.push(rows.len());
        rows.push(RowRef {
            slot,
            pos: base + depth,
            parent: parent.map(|p| at[p]),
        });
        tokens.push(tree.tokens[i]);
    }
    at
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn tree_rows_equal_serial_steps_along_each_path(
        prompt in prop::collection::vec(0u32..480, 1..6),
        t1 in tree_strategy(9),
        t2 in tree_strategy(5),
        keep_node in 0usize..9,
        next_token in 0u32..480,
    ) {
        let m = model();
        let vocab = m.config.vocab_size;
        let prompt2: Vec<u32> = prompt.iter().map(|t| (t + 11) % 480).collect();
        let mut s1 = prefilled(m, &prompt);
        let mut s2 = prefilled(m, &prompt2);
        let (mut rows, mut tokens) = (Vec::new(), Vec::new());
        // Two slots' trees share one round, the second slot's rows first.
        let at2 = push_tree(&mut rows, &mut tokens, 1, prompt2.len(), &t2);
        let at1 = push_tree(&mut rows, &mut tokens, 0, prompt.len(), &t1);
        let all: Vec<usize> = (0..rows.len()).collect();
        let logits = m.forward(&rows, &tokens, &mut [&mut s1, &mut s2], &all).unwrap();
        for (tree, at, p) in [(&t1, &at1, &prompt), (&t2, &at2, &prompt2)] {
            for (node, &r) in at.iter().enumerate() {
                let mut seq = p.clone();
                seq.extend(path_of(tree, node).iter().map(|&n| tree.tokens[n]));
                let want = plain(m, &seq).pop().unwrap();
                prop_assert!(bits_equal(&logits[r * vocab..(r + 1) * vocab], &want), "node {} of {:?}", node, tree);
            }
        }
        // Keep one path of slot 0; the next row decodes as on the plain path.
        let node = keep_node % t1.parents.len();
        let path: Vec<usize> = path_of(&t1, node).iter().map(|&n| at1[n]).collect();
        m.keep(&mut s1, &path).unwrap();
        let mut seq = prompt.clone();
        seq.extend(path_of(&t1, node).iter().map(|&n| t1.tokens[n]));
        prop_assert_eq!(s1.len, seq.len());
        let got = m.forward_chains(&[RowRef::chain(0, seq.len(), 0, 0)], &[next_token], &mut [&mut s1], &[0]).unwrap();
        seq.push(next_token);
        prop_assert!(bits_equal(&got, &plain(m, &seq).pop().unwrap()), "after keeping node {}", node);
    }
}

#[test]
fn a_snapshot_restores_a_slot_that_decodes_like_the_original() {
    let m = model();
    let prompt: Vec<u32> = (0..21).map(|i| (i * 37 + 5) % 480).collect();
    let mut slot = prefilled(m, &prompt);
    let snap = m.snapshot(&slot);
    let mut restored = m.restore(&snap).unwrap();
    let a = m
        .forward_chains(&[RowRef::chain(0, 21, 0, 0)], &[7], &mut [&mut slot], &[0])
        .unwrap();
    let b = m
        .forward_chains(
            &[RowRef::chain(0, 21, 0, 0)],
            &[7],
            &mut [&mut restored],
            &[0],
        )
        .unwrap();
    assert!(bits_equal(&a, &b));
    assert!(m.snapshot_bytes(&snap) > 0);
}
