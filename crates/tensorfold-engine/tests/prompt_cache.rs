//! The prompt cache under a burst: the replies' end snapshots, taken last, give way before the prompts' own.

use std::path::PathBuf;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_core::Checkpoint;
use tensorfold_engine::check::collect;
use tensorfold_engine::{spawn, EngineConfig, EngineHandle, Request};
use tensorfold_model::Qwen35;

fn engine(prompt_cache_bytes: usize) -> EngineHandle {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tiny-wrapper-bf16");
    let model = Qwen35::load(
        &Checkpoint::open(&dir, |_, _| {}).unwrap(),
        CpuBackend::default(),
    )
    .unwrap();
    spawn(
        model,
        EngineConfig {
            prompt_cache_bytes,
            calibrate_secs: 0.0,
            ..EngineConfig::default()
        },
    )
}

fn request(first: u32) -> Request {
    // 20 prompt tokens and 4 more: snapshots of the prompt (19 tokens) and of the reply's end (23: the last token
    // drawn is not yet committed).
    let mut req = Request::greedy((first..first + 20).collect(), 4);
    req.ignore_eos = true;
    req
}

#[test]
fn a_prompt_sent_again_after_a_burst_resumes_from_its_own_snapshot() {
    // The two snapshots' bytes, from a cache with room to spare.
    let probe = engine(64 << 20);
    collect(probe.submit(request(1)).unwrap()).unwrap();
    let s = probe.stats();
    assert_eq!(
        s.prompt_cache_entries, 2,
        "the prompt's and the reply's end: {s:?}"
    );
    let pair = s.prompt_cache_bytes;

    // A byte short of two requests' snapshots: B's reply end must evict one of A's two (either makes room).
    let e = engine(2 * pair - 1);
    collect(e.submit(request(1)).unwrap()).unwrap();
    collect(e.submit(request(100)).unwrap()).unwrap();
    assert_eq!(e.stats().prompt_cache_entries, 3);
    // A least-recently-used cache would have evicted A's prompt, the oldest; A's reply end goes instead.
    let (_, usage) = collect(e.submit(request(1)).unwrap()).unwrap();
    assert_eq!(
        usage.cached_tokens, 19,
        "A resumes one row before its prompt's end"
    );
    let (_, usage) = collect(e.submit(request(100)).unwrap()).unwrap();
    assert_eq!(usage.cached_tokens, 19);
}
