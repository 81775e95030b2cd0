//! The engine's front door for servers and tools: submit a request, receive its tokens as events on a channel.
//! The engine runs on its own OS thread; dropping the receiver cancels the request at the next round.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tensorfold_core::sampling::SamplingParams;

/// Penalties applied to a row's logits before the keyed draw. They depend only on the tokens on that row's own
/// path (prompt + committed + ancestors in the window), so drafted, batched and plain replies stay equal.
#[derive(Clone, Debug, PartialEq)]
pub struct Penalties {
    /// OpenAI: subtract once for every token that already appeared in the completion.
    pub presence: f32,
    /// OpenAI: subtract per occurrence in the completion.
    pub frequency: f32,
    /// HF/vLLM: divide positive (multiply negative) logits of tokens seen in prompt or completion; 1 = off.
    pub repetition: f32,
}

impl Default for Penalties {
    /// No penalties (repetition 1 is the identity).
    fn default() -> Self {
        Penalties {
            presence: 0.0,
            frequency: 0.0,
            repetition: 1.0,
        }
    }
}

impl Penalties {
    pub fn is_off(&self) -> bool {
        self.presence == 0.0 && self.frequency == 0.0 && self.repetition == 1.0
    }
}

#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub penalties: Penalties,
    /// Token ids that end the reply (not emitted) unless `ignore_eos`.
    pub stop_ids: Vec<u32>,
    pub ignore_eos: bool,
    /// Allow drafts for this request (`"draft": false` turns them off; the reply is the same either way).
    pub draft: bool,
    /// Return the log-probability of each emitted token and this many alternatives (None = no logprobs).
    pub logprobs: Option<usize>,
    /// Prompt positions worth a prompt-cache snapshot (e.g. where the newest chat message starts).
    pub cache_marks: Vec<usize>,
    /// Set by the caller to end the reply at the engine's next round with a `Done` (finish `Stop`) that still
    /// carries the usage, e.g. when the server saw a stop string complete. Tokens drawn after it was set are
    /// sent too; the caller drops them.
    pub end: Option<Arc<AtomicBool>>,
}

impl Request {
    /// A greedy request with defaults, for tests and tools.
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Self {
        Request {
            prompt,
            max_tokens,
            sampling: SamplingParams::greedy(),
            penalties: Penalties {
                repetition: 1.0,
                ..Default::default()
            },
            stop_ids: Vec::new(),
            ignore_eos: false,
            draft: true,
            logprobs: None,
            cache_marks: Vec::new(),
            end: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    /// The most likely tokens at this position with their log-probabilities, best first.
    pub top: Vec<(u32, f32)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop id was drawn.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The client went away or asked to stop.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens restored from the prompt cache instead of computed.
    pub cached_tokens: usize,
    /// Draft rows verified, and how many of them were accepted.
    pub drafted: usize,
    pub accepted: usize,
    /// Rounds that drew tokens for this reply (completion_tokens / rounds = tokens per round).
    pub rounds: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Token {
        id: u32,
        logprob: Option<TokenLogprob>,
    },
    Done {
        finish: FinishReason,
        usage: Usage,
        token_sha: String,
        first_token_secs: f64,
        total_secs: f64,
    },
    Error(String),
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the request queue is full ({0} waiting); retry later")]
    QueueFull(usize),
    #[error("This server's maximum context length is {context} tokens; the request needs {needed} ({prompt} prompt + {max_tokens} max_tokens)")]
    ContextLength {
        context: usize,
        needed: usize,
        prompt: usize,
        max_tokens: usize,
    },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("the request needs {needed} KV pages ({tokens} tokens) but the pool holds {capacity}")]
    KvCapacity {
        needed: usize,
        capacity: usize,
        tokens: usize,
    },
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// Counters for /metrics and /health.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub requests_total: u64,
    pub requests_running: usize,
    pub queue_depth: usize,
    pub prompt_tokens_total: u64,
    pub completion_tokens_total: u64,
    pub prompt_cache_hits: u64,
    pub cached_tokens_total: u64,
    /// Snapshots the prompt cache holds now, and their bytes.
    pub prompt_cache_entries: usize,
    pub prompt_cache_bytes: usize,
    /// KV pages (all attention layers together) that live streams hold, the pool's capacity (None: bounded by
    /// memory alone, as on the CPU by default), the tokens that capacity holds across all streams, and how
    /// keys and values are stored (`--kv-cache-dtype`).
    pub kv_pages_used: usize,
    pub kv_pages_capacity: Option<usize>,
    pub kv_tokens_capacity: Option<usize>,
    pub kv_dtype: &'static str,
    pub drafted_total: u64,
    pub accepted_total: u64,
    pub rounds_total: u64,
    /// Round costs timed at start (rows, microseconds) that seed the window planner; empty when not timed.
    pub round_costs_us: Vec<(usize, u64)>,
    /// Where the engine thread's time went while streams were live.
    pub times: EngineTimes,
}

/// The engine thread's time by phase, cumulative microseconds over all rounds. On a GPU the device works while the
/// thread queues a round and waits for its draws; in the other phases it idles unless kernels were queued there
/// (keep's), so they are the rounds' host overhead.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineTimes {
    /// Laying out the round and running the model's forward (on a GPU: recording and sending its launches).
    pub forward_us: u64,
    /// Reading the round's draws or logits (on a GPU: waiting for the device to finish the round).
    pub wait_us: u64,
    /// Queueing the keeps that do not wait for the draws (prompt chunks, windows without drafts).
    pub keep_us: u64,
    /// Walking windows, sending tokens out and keeping drafted windows' accepted rows (the device idles here).
    pub walk_us: u64,
    /// Planning the next windows (drafters, the MTP head).
    pub draft_us: u64,
    /// Prompt-cache snapshots.
    pub snapshot_us: u64,
    /// The rest of the loop between rounds: commands, admission, planning marks, retiring streams.
    pub other_us: u64,
}

impl EngineTimes {
    /// Adds the time since `*t` to `*us` and restarts `*t`.
    pub(crate) fn lap(us: &mut u64, t: &mut std::time::Instant) {
        let now = std::time::Instant::now();
        *us += now.duration_since(*t).as_micros() as u64;
        *t = now;
    }

    pub fn total_us(&self) -> u64 {
        self.forward_us
            + self.wait_us
            + self.keep_us
            + self.walk_us
            + self.draft_us
            + self.snapshot_us
            + self.other_us
    }
}

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Streams that share rounds.
    pub parallel: usize,
    /// Longest prompt + max_tokens a request may ask for.
    pub context: usize,
    /// Requests waiting beyond `parallel` before submit answers QueueFull.
    pub max_queue: usize,
    /// Prompt rows one round takes, from all the streams still prefilling (round.rs: one budget, spent stream by
    /// stream); a chunk also ends at each prompt-cache snapshot.
    pub prefill_chunk: usize,
    /// Prompt-cache budget in bytes (0 = off).
    pub prompt_cache_bytes: usize,
    /// Use drafters at all (`--no-drafts` turns them off).
    pub drafts: bool,
    /// Builds each stream's drafter (default: context copies).
    pub drafter: crate::drafters::DrafterFactory,
    /// Most draft rows in one window. 64 (the copy drafter's widest window): a copy that keeps landing whole then
    /// pays one round's fixed cost per 65 tokens; on the 2-core CPU the rewrite went from 2.8–3.0× to 3.1–3.5× plain
    /// against 32 (BENCHMARKS.md §4). The planner still picks narrower windows where drafts land less often.
    pub max_draft: usize,
    /// Snapshot long prompts every this many tokens (0 = only at explicit marks and ends).
    pub cache_every: usize,
    /// Draft with the checkpoint's MTP head (when it has one) whenever the drafter above is not confident.
    pub mtp: bool,
    /// Longest MTP chain per window.
    pub mtp_depth: usize,
    /// An MTP chain ends at the first draft the head gives less than this probability.
    pub mtp_min_prob: f32,
    /// Most window rows (pending rows and drafts of all streams) in one shared round.
    pub max_round_rows: usize,
    /// Pick MTP widths from measured round costs and acceptance (else always `mtp_depth`).
    pub plan_widths: bool,
    /// Kept rows held per stream for the MTP head while it is not drafting (older ones it never sees).
    pub mtp_history: usize,
    /// Seconds the engine may spend at start timing rounds of 1, 2, 4 … rows on its device and model, so the
    /// first windows are planned from real costs (0 = learn costs from live rounds only).
    pub calibrate_secs: f64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            parallel: 4,
            context: 8192,
            max_queue: 64,
            prefill_chunk: 256,
            prompt_cache_bytes: 1 << 30,
            drafts: true,
            drafter: crate::drafters::DrafterFactory::context_copy(),
            max_draft: 64,
            cache_every: 1024,
            mtp: true,
            mtp_depth: 4,
            mtp_min_prob: 0.1,
            max_round_rows: 96,
            plan_widths: true,
            mtp_history: 256,
            calibrate_secs: 1.0,
        }
    }
}
