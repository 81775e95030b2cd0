//! The equality suite behind `tensorfold check` and the CI tests: drafted, concurrent, resumed and chunked
//! replies against the plain reply (one stream alone, whole-prompt prefill, one row per token), by token_sha.

use crate::api::{EngineConfig, Event, Penalties, Request, Usage};
use crate::drafters::{DraftTree, Drafter, DrafterFactory};
use crate::generate::{generate, GenerateRequest};
use crate::scheduler::spawn;
use std::collections::HashMap;
use std::sync::Arc;
use tensorfold_backend::Backend;
use tensorfold_core::sampling::{token_sha, SamplingParams};
use tensorfold_core::{CoreError, Result};
use tensorfold_model::Qwen35;

/// One line of the receipt.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    pub name: String,
    pub reference_sha: String,
    pub got_sha: String,
    pub note: String,
}

impl CaseResult {
    pub fn pass(&self) -> bool {
        self.reference_sha == self.got_sha
    }
}

/// Deterministic request mix: prompts of mixed lengths, greedy and seeded sampled, two with penalties.
pub fn suite_requests(vocab_limit: u32, max_tokens: usize) -> Vec<Request> {
    let lens = [3usize, 17, 40, 9, 70, 5, 28, 12];
    lens.iter()
        .enumerate()
        .map(|(i, &n)| {
            let prompt: Vec<u32> = (0..n as u32)
                .map(|j| j.wrapping_mul(2_654_435_761).wrapping_add(i as u32 * 97) % vocab_limit)
                .collect();
            let mut r = Request::greedy(prompt, max_tokens);
            r.ignore_eos = true;
            if i % 2 == 1 {
                r.sampling = SamplingParams {
                    temperature: 0.9,
                    top_k: 40,
                    top_p: 0.95,
                    min_p: 0.0,
                    seed: 1000 + i as u64,
                };
            }
            if i == 7 {
                // Temperature alone (the API's default shape): the keyed Gumbel-max over the whole vocabulary,
                // which a GPU backend draws on the device.
                r.sampling.top_k = 0;
                r.sampling.top_p = 1.0;
            }
            if i == 3 {
                r.penalties = Penalties {
                    presence: 0.4,
                    frequency: 0.2,
                    repetition: 1.15,
                };
            }
            if i == 4 {
                // Greedy under strong penalties: a row's draw depends on every token before it, drafted ones
                // included, so a draft row that missed one of its path's tokens would draw differently.
                r.penalties = Penalties {
                    presence: 1.5,
                    frequency: 0.5,
                    repetition: 1.3,
                };
            }
            r
        })
        .collect()
}

/// Copy-heavy requests: prompts that repeat a segment, and one that holds `a, t` for every token t after its
/// last token a, so that whatever the model draws first, a context copy (two-token match) has something to copy.
pub fn copy_requests(vocab_limit: u32, vocab: u32, max_tokens: usize) -> Vec<Request> {
    let a = 7 % vocab_limit;
    // (Up to 512 ids: enough for the fixtures' whole vocabulary, short enough for any model.)
    let mut every: Vec<u32> = (0..vocab.min(512)).flat_map(|t| [a, t]).collect();
    every.push(a);
    let mut every = Request::greedy(every, max_tokens);
    every.ignore_eos = true;
    let repeats = [10usize, 16, 7, 24].iter().enumerate().map(|(i, &n)| {
        let seg: Vec<u32> = (0..n as u32)
            .map(|j| (j * 193 + 7 + i as u32 * 31) % vocab_limit)
            .collect();
        let mut prompt = Vec::new();
        for _ in 0..3 {
            prompt.extend_from_slice(&seg);
        }
        prompt.extend_from_slice(&seg[..n / 2]);
        let mut r = Request::greedy(prompt, max_tokens);
        r.ignore_eos = true;
        if i % 2 == 1 {
            r.sampling = SamplingParams {
                temperature: 0.7,
                top_k: 20,
                top_p: 0.9,
                min_p: 0.0,
                seed: 77 + i as u64,
            };
        }
        r
    });
    repeats.chain([every]).collect()
}

/// The plain reply: the request alone, whole prompt in one round, then one row per token, no drafts.
pub fn plain_reply<B: Backend>(model: &Qwen35<B>, req: &Request) -> Result<Vec<u32>> {
    let out = generate(
        model,
        &GenerateRequest {
            prompt: req.prompt.clone(),
            max_tokens: req.max_tokens,
            sampling: req.sampling.clone(),
            penalties: req.penalties.clone(),
            stop_ids: req.stop_ids.clone(),
            ignore_eos: req.ignore_eos,
            prefill_chunk: req.prompt.len().max(1),
            want_prompt_logits: false,
        },
        |_| true,
    )?;
    Ok(out.tokens)
}

/// Collects a request's events: its tokens and usage (errors become CoreError).
pub fn collect(mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>) -> Result<(Vec<u32>, Usage)> {
    let mut tokens = Vec::new();
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            Event::Token { id, .. } => tokens.push(id),
            Event::Done { usage, .. } => return Ok((tokens, usage)),
            Event::Error(e) => return Err(CoreError::Invalid(e)),
        }
    }
    Err(CoreError::Invalid(
        "the engine closed the stream without Done".into(),
    ))
}

/// A test drafter that knows the plain replies and proposes windows that are partly right, partly wrong:
/// chains or trees, random or adversarial (the right token placed last among siblings, or never).
pub struct OracleDrafter {
    replies: Arc<HashMap<Vec<u32>, Vec<u32>>>,
    trees: bool,
    state: u64,
    /// Wrong guesses stay below this id, so they are valid tokens of the model under test.
    vocab_limit: u32,
}

impl OracleDrafter {
    pub fn factory(
        replies: Arc<HashMap<Vec<u32>, Vec<u32>>>,
        trees: bool,
        seed: u64,
        vocab_limit: u32,
    ) -> DrafterFactory {
        let counter = Arc::new(std::sync::atomic::AtomicU64::new(seed));
        DrafterFactory::new(move || {
            let s = counter.fetch_add(0x9E37_79B9, std::sync::atomic::Ordering::Relaxed);
            Box::new(OracleDrafter {
                replies: replies.clone(),
                trees,
                state: s | 1,
                vocab_limit: vocab_limit.max(1),
            })
        })
    }
    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }
}

impl Drafter for OracleDrafter {
    fn propose(&mut self, context: &[u32], max_nodes: usize) -> DraftTree {
        let Some((prompt, reply)) = self
            .replies
            .iter()
            .filter(|(p, _)| context.starts_with(p))
            .max_by_key(|(p, _)| p.len())
        else {
            return DraftTree::default();
        };
        let done = context.len() - prompt.len();
        let truth: Vec<u32> = reply.iter().skip(done).copied().collect();
        let limit = self.vocab_limit;
        let wrong = |t: u32, k: u64| (t.wrapping_add(1 + (k % 7) as u32)) % limit;
        let mut tree = DraftTree::default();
        let depth = (self.next() as usize % (max_nodes + 1)).min(max_nodes);
        let mode = self.next() % 4;
        let mut parent = None;
        for d in 0..depth {
            if tree.len() >= max_nodes {
                break;
            }
            let right = truth.get(d).copied().unwrap_or(7);
            let right_ok = mode != 0 && (d < depth / 2 + 1 || !self.next().is_multiple_of(3));
            let main = if right_ok {
                right
            } else {
                wrong(right, self.next())
            };
            if self.trees && tree.len() + 1 < max_nodes && self.next().is_multiple_of(2) {
                // A sibling first; adversarial mode puts the right token second.
                let sib = wrong(right, self.next());
                tree.parents.push(parent);
                tree.tokens.push(if mode == 3 { sib } else { main });
                tree.parents.push(parent);
                tree.tokens.push(if mode == 3 { main } else { sib });
                parent = Some(tree.len() - if mode == 3 { 1 } else { 2 });
            } else {
                tree.parents.push(parent);
                tree.tokens.push(main);
                parent = Some(tree.len() - 1);
            }
        }
        tree
    }
}

fn engine_replies<B: Backend>(
    model: Qwen35<B>,
    cfg: EngineConfig,
    reqs: &[Request],
) -> Result<Vec<(Vec<u32>, Usage)>> {
    let engine = spawn(model, cfg);
    let rxs: Vec<_> = reqs
        .iter()
        .map(|r| {
            engine
                .submit(r.clone())
                .map_err(|e| CoreError::Invalid(e.to_string()))
        })
        .collect::<Result<_>>()?;
    let out = rxs.into_iter().map(collect).collect::<Result<Vec<_>>>();
    engine.shutdown();
    out
}

/// Runs every case; `load` builds a fresh model (engines own theirs). `quick` trims the sweep for CI.
pub fn equality_suite<B: Backend>(
    load: &dyn Fn() -> Result<Qwen35<B>>,
    quick: bool,
) -> Result<Vec<CaseResult>> {
    let reference_model = load()?;
    let vocab_limit = (reference_model.config.vocab_size as u32).min(480);
    let max_tokens = if quick { 12 } else { 24 };
    let reqs = suite_requests(vocab_limit, max_tokens);
    let copy_reqs = copy_requests(
        vocab_limit,
        reference_model.config.vocab_size as u32,
        max_tokens,
    );
    let mut replies = HashMap::new();
    for r in reqs.iter().chain(&copy_reqs) {
        replies.insert(r.prompt.clone(), plain_reply(&reference_model, r)?);
    }
    let replies = Arc::new(replies);
    // Windows exactly as drafted (no width planning), so the oracle's trees reach the rounds whole.
    let base = EngineConfig {
        prompt_cache_bytes: 0,
        plan_widths: false,
        drafts: false,
        ..EngineConfig::default()
    };
    let mut results = Vec::new();
    let mut record = |name: String, req: &Request, got: &[u32], note: String| {
        results.push(CaseResult {
            name,
            reference_sha: token_sha(&replies[&req.prompt]),
            got_sha: token_sha(got),
            note,
        });
    };
    // drafted == plain: chains and trees from the oracle drafter, one stream at a time and all together.
    for (trees, seed, parallel) in [(false, 1u64, 8), (true, 2, 1), (true, 3, 8)] {
        let cfg = EngineConfig {
            drafts: true,
            max_draft: 6,
            parallel,
            drafter: OracleDrafter::factory(replies.clone(), trees, seed, vocab_limit),
            ..base.clone()
        };
        let got = engine_replies(load()?, cfg, &reqs)?;
        for (i, (r, (toks, usage))) in reqs.iter().zip(&got).enumerate() {
            let kind = if trees { "trees" } else { "chains" };
            record(
                format!("drafted {kind} seed {seed} req {i}"),
                r,
                toks,
                format!("accepted {}/{}", usage.accepted, usage.drafted),
            );
        }
    }
    // drafted == plain with the real drafters: context copies (chains and trees), the MTP head, and both as
    // planned by default; alone and all together, greedy and sampled.
    let all: Vec<Request> = reqs.iter().chain(&copy_reqs).cloned().collect();
    let eager_copies = crate::drafters::CopyConfig {
        key_len: 2,
        min_match: 2,
        start_width: 4,
        ..Default::default()
    };
    let mtp_only = EngineConfig {
        drafts: true,
        drafter: DrafterFactory::none(),
        mtp_min_prob: 0.0,
        plan_widths: false,
        ..base.clone()
    };
    let real = [
        (
            "copies",
            EngineConfig {
                drafts: true,
                mtp: false,
                parallel: 12,
                drafter: DrafterFactory::context_copy_with(eager_copies.clone()),
                ..base.clone()
            },
        ),
        (
            "mtp",
            EngineConfig {
                parallel: 12,
                ..mtp_only.clone()
            },
        ),
        (
            "mtp alone",
            EngineConfig {
                parallel: 1,
                ..mtp_only
            },
        ),
        (
            "copies+mtp default",
            EngineConfig {
                prompt_cache_bytes: 0,
                parallel: 12,
                ..EngineConfig::default()
            },
        ),
    ];
    let head = if reference_model.mtp.is_some() {
        ""
    } else {
        " (no head)"
    };
    for (kind, cfg) in real {
        let got = engine_replies(load()?, cfg, &all)?;
        for (i, (r, (toks, usage))) in all.iter().zip(&got).enumerate() {
            record(
                format!(
                    "drafted {kind}{} req {i}",
                    if kind.contains("mtp") { head } else { "" }
                ),
                r,
                toks,
                format!(
                    "accepted {}/{} in {} rounds",
                    usage.accepted, usage.drafted, usage.rounds
                ),
            );
        }
    }
    // concurrent == solo.
    for n in [1usize, 2, 4, 8] {
        let cfg = EngineConfig {
            parallel: n,
            ..base.clone()
        };
        let got = engine_replies(load()?, cfg, &reqs[..n])?;
        for (i, (r, (toks, _))) in reqs.iter().zip(&got).enumerate() {
            record(format!("concurrent {n} req {i}"), r, toks, String::new());
        }
    }
    // chunked == whole.
    let chunks: &[usize] = if quick { &[1, 7, 16] } else { &[1, 7, 16, 128] };
    for &c in chunks {
        let cfg = EngineConfig {
            prefill_chunk: c,
            parallel: 4,
            ..base.clone()
        };
        let got = engine_replies(load()?, cfg, &reqs)?;
        for (i, (r, (toks, _))) in reqs.iter().zip(&got).enumerate() {
            record(format!("chunk {c} req {i}"), r, toks, String::new());
        }
    }
    // resume == fresh: a request whose prompt extends an earlier one resumes from the cache, plain and drafted
    // (eager copies, else the head's full chains, which resume with the cached rows' context).
    let drafted = EngineConfig {
        drafts: true,
        drafter: DrafterFactory::context_copy_with(eager_copies),
        mtp_min_prob: 0.0,
        ..base.clone()
    };
    for (kind, drafting) in [("", &base), ("drafted ", &drafted)] {
        let cfg = EngineConfig {
            prompt_cache_bytes: 256 << 20,
            cache_every: 16,
            parallel: 1,
            calibrate_secs: 0.0,
            ..drafting.clone()
        };
        let engine = spawn(load()?, cfg);
        for (i, r) in reqs.iter().enumerate().filter(|(_, r)| r.prompt.len() > 8) {
            let _ = collect(
                engine
                    .submit(r.clone())
                    .map_err(|e| CoreError::Invalid(e.to_string()))?,
            )?;
            let mut longer = r.clone();
            longer.prompt.extend([5, 6, 7]);
            let want = plain_reply(&reference_model, &longer)?;
            let (got, usage) = collect(
                engine
                    .submit(longer.clone())
                    .map_err(|e| CoreError::Invalid(e.to_string()))?,
            )?;
            // The identical prompt again: resumes from one row before its end.
            let (again, usage2) = collect(
                engine
                    .submit(r.clone())
                    .map_err(|e| CoreError::Invalid(e.to_string()))?,
            )?;
            let hit = |u: &Usage, toks: &[u32]| {
                if u.cached_tokens > 0 {
                    token_sha(toks)
                } else {
                    "no-cache-hit".into()
                }
            };
            let note = |u: &Usage, n: usize| {
                format!(
                    "cached {} of {n}, accepted {}/{}",
                    u.cached_tokens, u.accepted, u.drafted
                )
            };
            results.push(CaseResult {
                name: format!("resumed {kind}extended req {i}"),
                reference_sha: token_sha(&want),
                got_sha: hit(&usage, &got),
                note: note(&usage, longer.prompt.len()),
            });
            results.push(CaseResult {
                name: format!("resumed {kind}repeat req {i}"),
                reference_sha: token_sha(&replies[&r.prompt]),
                got_sha: hit(&usage2, &again),
                note: note(&usage2, r.prompt.len()),
            });
        }
        engine.shutdown();
    }
    Ok(results)
}
