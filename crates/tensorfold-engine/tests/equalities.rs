//! The four equalities through the real engine on committed fixtures: drafted (oracle chains and trees, random
//! and adversarial; context copies; the MTP head; both as planned by default), concurrent, chunked and resumed
//! replies all equal the plain reply, greedy and sampled.

use std::path::PathBuf;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_core::{Checkpoint, Result};
use tensorfold_engine::check::{copy_requests, equality_suite, plain_reply, suite_requests};
use tensorfold_model::Qwen35;

fn loader(name: &'static str) -> impl Fn() -> Result<Qwen35<CpuBackend>> {
    loader_on(name, CpuBackend::default())
}

/// The fixture on (a clone of) `backend`.
fn loader_on(name: &'static str, backend: CpuBackend) -> impl Fn() -> Result<Qwen35<CpuBackend>> {
    move || {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures")
            .join(name);
        Qwen35::load(&Checkpoint::open(&dir, |_, _| {})?, backend.clone())
    }
}

fn assert_suite_passes(name: &'static str) {
    assert_suite_passes_with(name, &loader(name));
}

fn assert_suite_passes_with(name: &'static str, load: &dyn Fn() -> Result<Qwen35<CpuBackend>>) {
    let results = equality_suite(load, true).expect("suite runs");
    let failures: Vec<_> = results.iter().filter(|r| !r.pass()).collect();
    assert!(failures.is_empty(), "{name}: {failures:#?}");
    assert!(results.len() > 60, "the whole sweep ran: {}", results.len());
    // The sweep must really have drafted, accepted and resumed, or it proves nothing.
    let accepted: usize = results
        .iter()
        .filter_map(|r| {
            r.note
                .strip_prefix("accepted ")
                .and_then(|n| n.split('/').next()?.parse::<usize>().ok())
        })
        .sum();
    assert!(accepted > 20, "{name}: drafts were accepted ({accepted})");
    // The real drafters must really have drafted: copies on every fixture, the head where there is one.
    let drafted = |prefix: &str| -> usize {
        results
            .iter()
            .filter(|r| r.name.starts_with(prefix) && !r.name.contains("(no head)"))
            .filter_map(|r| {
                r.note
                    .split('/')
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .parse::<usize>()
                    .ok()
            })
            .sum()
    };
    assert!(
        drafted("drafted copies ") > 0,
        "{name}: copies were drafted"
    );
    if name == "tiny-wrapper-bf16" {
        assert!(drafted("drafted mtp ") > 50, "{name}: the MTP head drafted");
        assert!(
            drafted("drafted mtp alone ") > 20,
            "{name}: the MTP head drafted alone"
        );
    }
    assert!(results
        .iter()
        .any(|r| r.name.starts_with("resumed") && r.pass()));
    // Resumed drafted replies must really have drafted (note: "cached c of n, accepted a/d").
    let resumed_drafted: usize = results
        .iter()
        .filter(|r| r.name.starts_with("resumed drafted") && r.pass())
        .filter_map(|r| r.note.rsplit('/').next()?.parse::<usize>().ok())
        .sum();
    // Copies alone draft little on the suite's prompts; the head drafts every window.
    let want = if name == "tiny-wrapper-bf16" { 50 } else { 1 };
    assert!(
        resumed_drafted >= want,
        "{name}: drafted replies resumed from the cache ({resumed_drafted} drafts)"
    );
}

#[test]
fn every_equality_holds_on_the_bf16_wrapper_fixture() {
    assert_suite_passes("tiny-wrapper-bf16");
}

#[test]
fn every_equality_holds_with_a_bf16_kv_cache() {
    // The fixture with an MTP head, so the head's attention layer stores bf16 keys too.
    let name = "tiny-wrapper-bf16";
    let bf16 = CpuBackend::default().with_kv_dtype(tensorfold_backend::KvDtype::Bf16);
    assert_suite_passes_with(name, &loader_on(name, bf16));
}

#[test]
fn every_equality_holds_on_the_mixed_width_mlx_fixture() {
    assert_suite_passes("tiny-mlx-mixed");
}

#[test]
fn the_receipts_carry_information_different_requests_give_different_shas() {
    let results = equality_suite(&loader("tiny-flat-f16-notok"), true).expect("suite runs");
    let shas: std::collections::BTreeSet<_> =
        results.iter().map(|r| r.reference_sha.clone()).collect();
    assert!(
        shas.len() >= 8,
        "eight requests, eight distinct plain replies: {shas:?}"
    );
    assert!(
        results.iter().all(|r| r.pass()),
        "{:#?}",
        results.iter().filter(|r| !r.pass()).collect::<Vec<_>>()
    );
}

#[test]
fn drawing_every_row_at_once_as_a_gpu_does_changes_no_reply() {
    // The engine draws all of a round's logit rows in one draw_rows call when the backend draws on the device
    // (and then reads rows back only for penalties and logprobs), and a cut row from its best ranks alone, as a
    // GPU does: the suite's sampled, penalised and drafted replies must equal that backend's plain ones, and
    // those must equal the plain replies of the host, which draws from whole rows as the walk reaches them.
    let name = "tiny-mlx-4bit";
    let load = loader_on(name, CpuBackend::default().drawing_every_row());
    assert_suite_passes_with(name, &load);
    let (device_way, host) = (load().unwrap(), loader(name)().unwrap());
    let vocab = host.config.vocab_size as u32;
    let reqs = suite_requests(vocab.min(480), 12);
    let copies = copy_requests(vocab.min(480), vocab, 12);
    assert!(reqs.iter().chain(&copies).any(|r| r.sampling.top_k > 0));
    for r in reqs.iter().chain(&copies) {
        assert_eq!(
            plain_reply(&device_way, r).unwrap(),
            plain_reply(&host, r).unwrap(),
            "{:?}",
            r.sampling
        );
    }
}
