//! Admission and lifetime: KV pages are reserved for prompt + max_tokens up front, so a request that can never
//! fit is refused with a clear error, one that cannot fit yet waits, and a cancelled stream gives its pages back.

use std::path::PathBuf;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::Backend;
use tensorfold_core::Checkpoint;
use tensorfold_engine::check::collect;
use tensorfold_engine::{spawn, EngineConfig, Event, Request, SubmitError};
use tensorfold_model::Qwen35;

fn model(pages: usize) -> Qwen35<CpuBackend> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-wrapper-bf16");
    Qwen35::load(
        &Checkpoint::open(&dir, |_, _| {}).unwrap(),
        CpuBackend::with_kv_pages(pages),
    )
    .unwrap()
}

fn request(n: usize, max_tokens: usize) -> Request {
    let mut r = Request::greedy(
        (0..n as u32).map(|i| (i * 13 + 1) % 480).collect(),
        max_tokens,
    );
    r.ignore_eos = true;
    r
}

#[test]
fn a_request_that_can_never_fit_the_kv_pool_is_refused_up_front() {
    // The fixture has 2 attention layers; 8 pages hold 4 pages (64 positions) per layer.
    let engine = spawn(model(8), EngineConfig::default());
    match engine.submit(request(40, 40)) {
        Err(e @ SubmitError::KvCapacity { .. }) => {
            assert!(e.to_string().contains("KV pages"), "{e}")
        }
        other => panic!("expected KvCapacity, got {other:?}"),
    }
    let (tokens, _) = collect(engine.submit(request(10, 20)).unwrap()).unwrap();
    assert_eq!(tokens.len(), 20, "the engine keeps serving after a refusal");
    engine.shutdown();
}

#[test]
fn requests_that_fit_only_one_at_a_time_wait_and_both_finish() {
    let m = model(8);
    let engine = spawn(
        m,
        EngineConfig {
            parallel: 4,
            ..EngineConfig::default()
        },
    );
    let a = engine.submit(request(30, 30)).unwrap();
    let b = engine.submit(request(30, 30)).unwrap();
    let (ta, _) = collect(a).unwrap();
    let (tb, _) = collect(b).unwrap();
    assert_eq!((ta.len(), tb.len()), (30, 30));
    engine.shutdown();
}

#[test]
fn dropping_the_receiver_cancels_the_stream_and_returns_its_pages() {
    let backend = CpuBackend::with_kv_pages(64);
    let probe = backend.clone();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-wrapper-bf16");
    let m = Qwen35::load(&Checkpoint::open(&dir, |_, _| {}).unwrap(), backend).unwrap();
    let engine = spawn(
        m,
        EngineConfig {
            prompt_cache_bytes: 0,
            ..EngineConfig::default()
        },
    );
    let mut rx = engine.submit(request(20, 400)).unwrap();
    // Read a couple of tokens, then walk away.
    for _ in 0..2 {
        assert!(matches!(rx.blocking_recv(), Some(Event::Token { .. })));
    }
    // While it streams, /metrics' KV figures say what it holds out of what the pool allows.
    let s = engine.stats();
    assert!(s.kv_pages_used > 0 && s.kv_pages_used <= 64, "{s:?}");
    assert_eq!(s.kv_pages_capacity, Some(64));
    assert_eq!(s.kv_dtype, "f32");
    drop(rx);
    // The next request completes, and afterwards no page is held.
    let (tokens, _) = collect(engine.submit(request(5, 5)).unwrap()).unwrap();
    assert_eq!(tokens.len(), 5);
    // Done is sent as a stream retires; give the engine thread a moment to drop the slot. Retire counts a stream
    // out of requests_running before its pages go back, so once they are back the count is 0 too.
    for _ in 0..100 {
        if probe.kv_pages().2 == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        probe.kv_pages().2,
        0,
        "every page returned to the pool while the engine runs"
    );
    assert_eq!(engine.stats().requests_running, 0);
    engine.shutdown();
}

#[test]
fn a_prompt_longer_than_the_context_is_refused_with_context_length() {
    let engine = spawn(
        model(1 << 20),
        EngineConfig {
            context: 32,
            ..EngineConfig::default()
        },
    );
    match engine.submit(request(30, 10)) {
        Err(e @ SubmitError::ContextLength { .. }) => {
            assert!(
                e.to_string().contains("maximum context length is 32"),
                "{e}"
            )
        }
        other => panic!("expected ContextLength, got {other:?}"),
    }
    engine.shutdown();
}
