//! The round's bit-level promises on the CPU backend: chunked prefill equals whole prefill, and a slot's rows
//! give the same bits whether or not another slot shares the round.

use std::path::PathBuf;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::RowRef;
use tensorfold_core::Checkpoint;
use tensorfold_model::Qwen35;

fn model(name: &str) -> Qwen35<CpuBackend> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name);
    let ck = Checkpoint::open(&dir, |_, _| {}).expect("fixture opens");
    Qwen35::load(&ck, CpuBackend::default()).expect("fixture binds")
}

fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 131 + salt * 17 + 7) % 480)
        .collect()
}

/// Prefill `ids` in chunks of `chunk` rows, returning every position's logits.
fn prefill(m: &Qwen35<CpuBackend>, ids: &[u32], chunk: usize) -> Vec<f32> {
    let mut slot = m.new_slot();
    let mut out = Vec::new();
    for (c, piece) in ids.chunks(chunk).enumerate() {
        let rows: Vec<RowRef> = (0..piece.len())
            .map(|i| RowRef::chain(0, c * chunk, 0, i))
            .collect();
        let all: Vec<usize> = (0..piece.len()).collect();
        out.extend(
            m.forward_chains(&rows, piece, &mut [&mut slot], &all)
                .unwrap(),
        );
    }
    out
}

#[test]
fn chunked_prefill_gives_the_same_bits_as_whole_prefill() {
    for name in ["tiny-wrapper-bf16", "tiny-flat-f16-notok"] {
        let m = model(name);
        let ids = prompt(23, 1);
        let whole = prefill(&m, &ids, ids.len());
        for chunk in [1, 2, 5, 7, 16] {
            let chunked = prefill(&m, &ids, chunk);
            assert!(
                whole
                    .iter()
                    .zip(&chunked)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name}: chunk {chunk} differs from whole prefill"
            );
        }
    }
}

#[test]
fn a_slot_sharing_its_round_gets_the_same_bits_as_alone() {
    let m = model("tiny-wrapper-bf16");
    let (a, b) = (prompt(9, 2), prompt(14, 3));
    let solo_a = prefill(&m, &a, a.len());
    let solo_b = prefill(&m, &b, b.len());
    // Both prompts in one round, rows interleaved.
    let (mut sa, mut sb) = (m.new_slot(), m.new_slot());
    let mut rows = Vec::new();
    let mut tokens = Vec::new();
    for i in 0..a.len().max(b.len()) {
        if i < b.len() {
            let parent = rows.iter().rposition(|r: &RowRef| r.slot == 1);
            rows.push(RowRef {
                slot: 1,
                pos: i,
                parent,
            });
            tokens.push(b[i]);
        }
        if i < a.len() {
            let parent = rows.iter().rposition(|r: &RowRef| r.slot == 0);
            rows.push(RowRef {
                slot: 0,
                pos: i,
                parent,
            });
            tokens.push(a[i]);
        }
    }
    let all: Vec<usize> = (0..rows.len()).collect();
    let logits = m
        .forward(&rows, &tokens, &mut [&mut sa, &mut sb], &all)
        .unwrap();
    let vocab = m.config.vocab_size;
    for (i, r) in rows.iter().enumerate() {
        let got = &logits[i * vocab..(i + 1) * vocab];
        let solo = if r.slot == 0 { &solo_a } else { &solo_b };
        let want = &solo[r.pos * vocab..(r.pos + 1) * vocab];
        assert!(
            got.iter()
                .zip(want)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "row {r:?} differs"
        );
    }
}

#[test]
fn rows_that_skip_a_position_are_refused() {
    let m = model("tiny-flat-f16-notok");
    let mut slot = m.new_slot();
    let err = m.forward(
        &[RowRef {
            slot: 0,
            pos: 1,
            parent: None,
        }],
        &[3],
        &mut [&mut slot],
        &[0],
    );
    assert!(err.is_err());
    assert_eq!(slot.len, 0, "a refused round leaves the slot untouched");
}

#[test]
fn with_a_bf16_kv_cache_chunked_prefill_still_gives_the_bits_of_whole_prefill() {
    // The keys and values are rounded where they are made, so a row whose keys are committed (an earlier chunk)
    // and one whose keys are still in its round (the same chunk) see the same numbers.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-wrapper-bf16");
    let ck = Checkpoint::open(&dir, |_, _| {}).expect("fixture opens");
    let bf16 = Qwen35::load(
        &ck,
        CpuBackend::default().with_kv_dtype(tensorfold_backend::KvDtype::Bf16),
    )
    .expect("fixture binds");
    let ids = prompt(23, 3);
    let whole = prefill(&bf16, &ids, ids.len());
    for chunk in [1, 4, 16] {
        let chunked = prefill(&bf16, &ids, chunk);
        assert!(
            whole
                .iter()
                .zip(&chunked)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "chunk {chunk} differs from whole prefill with a bf16 KV cache"
        );
    }
    // And the option really rounds: the logits differ from the f32 cache's.
    let f32_whole = prefill(&model("tiny-wrapper-bf16"), &ids, ids.len());
    assert!(whole.iter().zip(&f32_whole).any(|(a, b)| a != b));
}
