//! The MTP head's context survives the prompt cache: a stream resumed from a snapshot drafts with the head exactly
//! as the same request does from a cold prefill (same drafts landing, same tokens), on the built-in model.

use std::path::PathBuf;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_core::Checkpoint;
use tensorfold_engine::check::collect;
use tensorfold_engine::{spawn, DrafterFactory, EngineConfig, Request, Usage};
use tensorfold_model::Qwen35;

fn model() -> Qwen35<CpuBackend> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/tensorfold-coder-tiny");
    Qwen35::load(
        &Checkpoint::open(&dir, |_, _| {}).unwrap(),
        CpuBackend::default(),
    )
    .unwrap()
}

/// Head drafts only, at a fixed depth, so what is drafted and accepted depends on the head's state alone.
fn head_only(prompt_cache_bytes: usize) -> EngineConfig {
    EngineConfig {
        parallel: 1,
        prompt_cache_bytes,
        drafter: DrafterFactory::none(),
        plan_widths: false,
        mtp_min_prob: 0.0,
        calibrate_secs: 0.0,
        ..EngineConfig::default()
    }
}

fn request(prompt: &[u32]) -> Request {
    let mut r = Request::greedy(prompt.to_vec(), 24);
    r.ignore_eos = true;
    r
}

fn tokenize(text: &str) -> Vec<u32> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/tensorfold-coder-tiny");
    let tok = tensorfold_core::tokenizer::TextTokenizer::from_dir(&dir)
        .unwrap()
        .unwrap();
    tok.encode(text).unwrap()
}

#[test]
fn a_stream_resumed_from_the_cache_drafts_with_the_head_as_a_cold_one_does() {
    let first = tokenize(
        "def load(path):\n    with open(path) as f:\n        return f.read()\n\n\ndef save(",
    );
    let mut longer = first.clone();
    longer.extend(tokenize("path, data):\n    with open(path, 'w') as f:\n"));
    assert!(longer.len() < EngineConfig::default().mtp_history);

    let cold = spawn(model(), head_only(0));
    let want: Vec<(Vec<u32>, Usage)> = [&first, &longer]
        .iter()
        .map(|p| collect(cold.submit(request(p)).unwrap()).unwrap())
        .collect();
    cold.shutdown();

    let warm = spawn(model(), head_only(64 << 20));
    let _ = collect(warm.submit(request(&first)).unwrap()).unwrap();
    // `longer` extends `first`: it resumes at `first`'s end; `first` again resumes one row before its end.
    for (prompt, (tokens, usage)) in [&longer, &first].into_iter().zip([&want[1], &want[0]]) {
        let (got, got_usage) = collect(warm.submit(request(prompt)).unwrap()).unwrap();
        assert!(got_usage.cached_tokens > 0, "resumed from the cache");
        assert_eq!(&got, tokens, "resume == fresh");
        assert!(usage.accepted > 0, "the head's drafts land: {usage:?}");
        assert_eq!(
            (got_usage.drafted, got_usage.accepted),
            (usage.drafted, usage.accepted),
            "the resumed head drafted as the cold one (cached {})",
            got_usage.cached_tokens
        );
    }
    warm.shutdown();
}
