//! Every committed fixture against its float64 transformers reference: teacher-forced logits within tolerance,
//! greedy tokens equal up to the reference's first near-tie.

use std::path::{Path, PathBuf};
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::{KvDtype, RowRef};
use tensorfold_core::sampling::argmax;
use tensorfold_core::Checkpoint;
use tensorfold_model::Qwen35;

/// A greedy step whose reference top-2 margin is below this may legitimately flip in f32.
const NEAR_TIE: f64 = 1e-3;

struct Reference {
    prompt: Vec<u32>,
    logits: Vec<f64>,
    greedy: Vec<u32>,
    margins: Vec<f64>,
}

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn read_reference(dir: &Path) -> Reference {
    let bytes = std::fs::read(dir.join("reference.safetensors")).expect("reference.safetensors");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid reference");
    let i64s = |n: &str| -> Vec<u32> {
        st.tensor(n)
            .expect(n)
            .data()
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
            .collect()
    };
    let f64s = |n: &str| -> Vec<f64> {
        st.tensor(n)
            .expect(n)
            .data()
            .chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    Reference {
        prompt: i64s("prompt_ids"),
        logits: f64s("logits"),
        greedy: i64s("greedy_ids"),
        margins: f64s("greedy_margins"),
    }
}

struct Outcome {
    max_diff: f64,
    equal_greedy: usize,
    comparable: usize,
}

fn check_fixture(dir: &Path, kv: KvDtype) -> Outcome {
    let ck = Checkpoint::open(dir, |_, _| {}).expect("fixture opens");
    let model = Qwen35::load(&ck, CpuBackend::default().with_kv_dtype(kv)).expect("fixture binds");
    let r = read_reference(dir);
    let vocab = model.config.vocab_size;
    let mut slot = model.new_slot();
    let rows: Vec<RowRef> = (0..r.prompt.len())
        .map(|pos| RowRef::chain(0, 0, 0, pos))
        .collect();
    let all: Vec<usize> = (0..r.prompt.len()).collect();
    let logits = model
        .forward_chains(&rows, &r.prompt, &mut [&mut slot], &all)
        .expect("forward");
    assert_eq!(logits.len(), r.logits.len(), "logit count");
    let max_diff = logits
        .iter()
        .zip(&r.logits)
        .map(|(&a, &b)| (a as f64 - b).abs())
        .fold(0.0, f64::max);
    // Greedy continuation from the slot's state, one row per token.
    let mut last = logits[logits.len() - vocab..].to_vec();
    let mut equal = 0;
    let comparable = r
        .margins
        .iter()
        .position(|&m| m < NEAR_TIE)
        .unwrap_or(r.greedy.len());
    for (i, &want) in r.greedy.iter().enumerate().take(comparable) {
        let got = argmax(&last);
        if got != want {
            break;
        }
        equal += 1;
        let pos = r.prompt.len() + i;
        last = model
            .forward_chains(
                &[RowRef::chain(0, pos, 0, 0)],
                &[got],
                &mut [&mut slot],
                &[0],
            )
            .expect("decode");
    }
    Outcome {
        max_diff,
        equal_greedy: equal,
        comparable,
    }
}

/// Every committed fixture and model with a float64 reference.
fn reference_dirs() -> Vec<PathBuf> {
    let root = fixtures_dir().join("..");
    let mut dirs: Vec<PathBuf> = ["fixtures", "models"]
        .iter()
        .filter_map(|d| std::fs::read_dir(root.join(d)).ok())
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("reference.safetensors").is_file())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 3,
        "expected the committed fixtures, found {dirs:?}"
    );
    dirs
}

#[test]
fn every_fixture_matches_its_float64_reference() {
    let dirs = reference_dirs();
    println!("| fixture | max abs logit diff | greedy tokens equal | before first near-tie |");
    println!("|---|---|---|---|");
    let mut failures = Vec::new();
    for dir in &dirs {
        let o = check_fixture(dir, KvDtype::F32);
        let name = format!(
            "{}/{}",
            dir.parent().unwrap().file_name().unwrap().to_string_lossy(),
            dir.file_name().unwrap().to_string_lossy()
        );
        println!(
            "| {name} | {:.2e} | {} | {} |",
            o.max_diff, o.equal_greedy, o.comparable
        );
        let tol = KvDtype::F32.oracle_tolerance();
        if o.max_diff > tol {
            failures.push(format!(
                "{name}: max logit diff {:.3e} > {tol:e}",
                o.max_diff
            ));
        }
        if o.equal_greedy < o.comparable {
            failures.push(format!(
                "{name}: greedy diverged at token {} of {}",
                o.equal_greedy, o.comparable
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn with_a_bf16_kv_cache_every_fixture_keeps_its_greedy_tokens_and_stays_near_float64() {
    let mut failures = Vec::new();
    for dir in &reference_dirs() {
        let (f32_kv, bf16_kv) = (
            check_fixture(dir, KvDtype::F32),
            check_fixture(dir, KvDtype::Bf16),
        );
        println!(
            "{}: max |logit - float64| {:.2e} (f32 KV {:.2e}); greedy equal {} of {}",
            dir.display(),
            bf16_kv.max_diff,
            f32_kv.max_diff,
            bf16_kv.equal_greedy,
            bf16_kv.comparable
        );
        // The rounding must happen (the logits move) and stay within the budget, and the tokens stay.
        if bf16_kv.max_diff == f32_kv.max_diff
            || bf16_kv.max_diff > KvDtype::Bf16.oracle_tolerance()
        {
            failures.push(format!("{}: {:.3e}", dir.display(), bf16_kv.max_diff));
        }
        if bf16_kv.equal_greedy < bf16_kv.comparable {
            failures.push(format!(
                "{}: greedy diverged at token {} of {}",
                dir.display(),
                bf16_kv.equal_greedy,
                bf16_kv.comparable
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
