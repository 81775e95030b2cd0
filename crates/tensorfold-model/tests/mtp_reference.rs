//! The MTP head against its float64 reference (tools/mtp_reference.py, vLLM's formulation) on the bf16 wrapper
//! fixture: over the target's own taps, chained on its own outputs, and alone; and its KV follows the kept path.

use std::path::PathBuf;
use std::sync::OnceLock;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::RowRef;
use tensorfold_core::Checkpoint;
use tensorfold_model::{Mtp, MtpSlot, Qwen35};

/// Max |logit − reference|: f32 arithmetic on bf16 weights against f64 on the same weights, through the target.
const LOGIT_TOL: f64 = 1e-3;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-wrapper-bf16")
}

fn model() -> &'static Qwen35<CpuBackend> {
    static M: OnceLock<Qwen35<CpuBackend>> = OnceLock::new();
    M.get_or_init(|| {
        let ck = Checkpoint::open(&fixture(), |_, _| {}).expect("fixture opens");
        Qwen35::load(&ck, CpuBackend::default()).expect("fixture binds")
    })
}

fn mtp() -> &'static Mtp<CpuBackend> {
    model().mtp.as_ref().expect("the fixture has mtp.* tensors")
}

struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    fn load() -> Self {
        Reference {
            bytes: std::fs::read(fixture().join("mtp_reference.safetensors"))
                .expect("mtp reference"),
        }
    }
    fn tensor(&self, name: &str) -> Vec<u8> {
        let st = safetensors::SafeTensors::deserialize(&self.bytes).expect("valid reference");
        st.tensor(name).expect(name).data().to_vec()
    }
    fn ids(&self, name: &str) -> Vec<u32> {
        let d = self.tensor(name);
        d.chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
            .collect()
    }
    fn f64s(&self, name: &str) -> Vec<f64> {
        let d = self.tensor(name);
        d.chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

fn max_diff(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "logit count");
    got.iter()
        .zip(want)
        .map(|(&a, &b)| (a as f64 - b).abs())
        .fold(0.0, f64::max)
}

fn chain_rows(start: usize, n: usize) -> Vec<RowRef> {
    (0..n).map(|i| RowRef::chain(0, start, 0, i)).collect()
}

#[test]
fn a_lone_mtp_chain_matches_the_float64_reference() {
    let (m, head) = (model(), mtp());
    let r = Reference::load();
    let hidden: Vec<f32> = r.f64s("lone_hidden").iter().map(|&x| x as f32).collect();
    let ids = r.ids("lone_ids");
    let start = r.ids("lone_start")[0] as usize;
    let mut slot = head.new_slot(&m.backend);
    let all: Vec<usize> = (0..ids.len()).collect();
    let out = head
        .forward(
            m,
            &chain_rows(start, ids.len()),
            &ids,
            &hidden,
            &mut [&mut slot],
            &all,
        )
        .unwrap();
    let d = max_diff(&out.logits, &r.f64s("lone_logits"));
    assert!(d < LOGIT_TOL, "max logit diff {d:.3e}");
}

#[test]
fn mtp_over_the_targets_taps_and_its_own_chained_outputs_matches_the_reference() {
    let (m, head) = (model(), mtp());
    let r = Reference::load();
    let prompt = r.ids("prompt_ids");
    let next = r.ids("next_ids");
    let h = m.config.hidden_size;
    let vocab = m.config.vocab_size;
    // The target's taps over the prompt, then the head over (tap_t, x_{t+1}) at position t.
    let mut target = m.new_slot();
    let rows = chain_rows(0, prompt.len());
    let all: Vec<usize> = (0..prompt.len()).collect();
    let (_, taps) = m
        .forward_taps(&rows, &prompt, &mut [&mut target], &[], &all)
        .unwrap();
    let want_taps = r.f64s("hidden");
    let tap_diff = max_diff(&taps, &want_taps);
    assert!(tap_diff < LOGIT_TOL, "target taps differ by {tap_diff:.3e}");
    let mut slot: MtpSlot<CpuBackend> = head.new_slot(&m.backend);
    let out = head
        .forward(m, &rows, &next, &taps, &mut [&mut slot], &all)
        .unwrap();
    head.keep(&m.backend, &mut slot, &all, 0).unwrap();
    let d = max_diff(&out.logits, &r.f64s("logits"));
    assert!(d < LOGIT_TOL, "prompt rows: max logit diff {d:.3e}");
    // Chained drafting: each step re-runs the pending chain (drafts are never kept) with d fed back as h.
    let chain = r.ids("chain_ids");
    let want = r.f64s("chain_logits");
    let t = prompt.len();
    let mut hidden = out.hidden[(t - 1) * h..t * h].to_vec();
    let mut previous: Vec<f32> = Vec::new();
    for i in 0..chain.len() {
        let rows = chain_rows(t, i + 1);
        let step = head
            .forward(m, &rows, &chain[..=i], &hidden, &mut [&mut slot], &[i])
            .unwrap();
        let d = max_diff(&step.logits, &want[i * vocab..(i + 1) * vocab]);
        assert!(d < LOGIT_TOL, "chain step {i}: max logit diff {d:.3e}");
        if i > 0 {
            // The re-run rows give the same bits as when they were last.
            let again = head
                .forward(
                    m,
                    &rows[..i],
                    &chain[..i],
                    &hidden[..i * h],
                    &mut [&mut slot],
                    &[i - 1],
                )
                .unwrap();
            assert_eq!(again.hidden, previous, "row {} re-run", i - 1);
        }
        previous = step.hidden.clone();
        hidden.extend_from_slice(&step.hidden);
    }
    assert_eq!(slot.next_pos, Some(t), "chained rows were never committed");
}

#[test]
fn the_mtp_kv_after_keeping_one_branch_equals_feeding_that_branch_alone() {
    let (m, head) = (model(), mtp());
    let h = m.config.hidden_size;
    let hid = |n: usize, salt: f32| -> Vec<f32> {
        (0..n * h).map(|i| (i as f32 * 0.37 + salt).sin()).collect()
    };
    let base = hid(4, 0.0);
    let base_ids = [5u32, 17, 99, 3];
    let start = 10;
    // Slot A: base rows, then a tree (two branches of two rows) of which branch b is kept.
    let mut a = head.new_slot(&m.backend);
    let rows = chain_rows(start, 4);
    head.forward(m, &rows, &base_ids, &base, &mut [&mut a], &[])
        .unwrap();
    head.keep(&m.backend, &mut a, &[0, 1, 2, 3], start).unwrap();
    let p = start + 4;
    let tree = [
        RowRef {
            slot: 0,
            pos: p,
            parent: None,
        },
        RowRef {
            slot: 0,
            pos: p + 1,
            parent: Some(0),
        },
        RowRef {
            slot: 0,
            pos: p,
            parent: None,
        },
        RowRef {
            slot: 0,
            pos: p + 1,
            parent: Some(2),
        },
    ];
    let tree_ids = [7u32, 8, 40, 41];
    let tree_hidden = hid(4, 1.0);
    head.forward(m, &tree, &tree_ids, &tree_hidden, &mut [&mut a], &[])
        .unwrap();
    head.keep(&m.backend, &mut a, &[2, 3], p).unwrap();
    // Slot B: the base rows and the kept branch as one chain.
    let mut b = head.new_slot(&m.backend);
    let mut hidden_b = base.clone();
    hidden_b.extend_from_slice(&tree_hidden[2 * h..4 * h]);
    head.forward(
        m,
        &chain_rows(start, 6),
        &[5, 17, 99, 3, 40, 41],
        &hidden_b,
        &mut [&mut b],
        &[],
    )
    .unwrap();
    head.keep(&m.backend, &mut b, &[0, 1, 2, 3, 4, 5], start)
        .unwrap();
    assert_eq!(a.next_pos, b.next_pos);
    let probe = hid(1, 2.0);
    let next = RowRef {
        slot: 0,
        pos: p + 2,
        parent: None,
    };
    let got_a = head
        .forward(m, &[next], &[11], &probe, &mut [&mut a], &[0])
        .unwrap();
    let got_b = head
        .forward(m, &[next], &[11], &probe, &mut [&mut b], &[0])
        .unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got_a.logits), bits(&got_b.logits));
}

#[test]
fn a_checkpoint_without_mtp_tensors_has_no_head() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-flat-f16-notok");
    let ck = Checkpoint::open(&dir, |_, _| {}).unwrap();
    assert!(Qwen35::load(&ck, CpuBackend::default())
        .unwrap()
        .mtp
        .is_none());
}
