//! Round costs timed at engine start: they seed the window planner when drafting is on, and cost nothing when it
//! is off.

use std::path::PathBuf;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_core::Checkpoint;
use tensorfold_engine::check::collect;
use tensorfold_engine::{spawn, EngineConfig, Request};
use tensorfold_model::Qwen35;

fn model() -> Qwen35<CpuBackend> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-wrapper-bf16");
    Qwen35::load(
        &Checkpoint::open(&dir, |_, _| {}).unwrap(),
        CpuBackend::default(),
    )
    .unwrap()
}

#[test]
fn round_costs_are_timed_at_start_from_one_row_up_to_the_widest_window() {
    let cfg = EngineConfig {
        max_draft: 12,
        ..EngineConfig::default()
    };
    let engine = spawn(model(), cfg);
    let costs = engine.stats().round_costs_us;
    let rows: Vec<usize> = costs.iter().map(|&(r, _)| r).collect();
    assert_eq!(rows, vec![1, 2, 3, 4, 8, 13], "widths timed: {costs:?}");
    assert!(costs.iter().all(|&(_, us)| us > 0), "{costs:?}");
    // Nothing was kept: a request afterwards runs from an empty slot as usual.
    let mut req = Request::greedy(vec![1, 2, 3, 4, 5], 6);
    req.ignore_eos = true;
    let (tokens, _) = collect(engine.submit(req).unwrap()).unwrap();
    assert_eq!(tokens.len(), 6);
}

#[test]
fn no_rounds_are_timed_without_drafts_or_with_no_budget() {
    for cfg in [
        EngineConfig {
            drafts: false,
            ..EngineConfig::default()
        },
        EngineConfig {
            calibrate_secs: 0.0,
            ..EngineConfig::default()
        },
    ] {
        let engine = spawn(model(), cfg);
        assert!(engine.stats().round_costs_us.is_empty());
    }
}

#[test]
fn the_engine_thread_time_is_split_by_phase_and_snapshots_are_counted_apart() {
    let cfg = EngineConfig {
        prompt_cache_bytes: 64 << 20,
        calibrate_secs: 0.0,
        ..EngineConfig::default()
    };
    let engine = spawn(model(), cfg);
    assert_eq!(engine.stats().times.total_us(), 0, "no stream has run yet");
    let mut req = Request::greedy((1..40).collect(), 8);
    req.ignore_eos = true;
    let (tokens, _) = collect(engine.submit(req).unwrap()).unwrap();
    assert_eq!(tokens.len(), 8);
    let t = engine.stats().times;
    // The CPU backend computes in forward; a finished reply and its prompt's end are snapshotted.
    assert!(t.forward_us > 0, "{t:?}");
    assert!(t.snapshot_us > 0, "{t:?}");
    assert!(t.forward_us > t.keep_us + t.walk_us + t.other_us, "{t:?}");
}

#[test]
fn a_prompt_is_snapshotted_every_cache_every_tokens_one_row_before_its_end_and_after_its_reply() {
    let cfg = EngineConfig {
        prompt_cache_bytes: 64 << 20,
        cache_every: 16,
        calibrate_secs: 0.0,
        ..EngineConfig::default()
    };
    let engine = spawn(model(), cfg);
    let mut req = Request::greedy((1..=40).collect(), 8);
    req.ignore_eos = true;
    collect(engine.submit(req.clone()).unwrap()).unwrap();
    // Keys of 16, 32 and 39 prompt tokens and the reply's end: not the prompt's own end (39 serves it).
    let s = engine.stats();
    assert_eq!(s.prompt_cache_entries, 4, "{s:?}");
    assert!(s.prompt_cache_bytes > 0);
    // The same prompt again resumes one row before its end.
    let (_, usage) = collect(engine.submit(req).unwrap()).unwrap();
    assert_eq!(usage.cached_tokens, 39);
}
