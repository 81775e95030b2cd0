//! Drives one submitted request: receives the engine's tokens, decodes them, applies stop strings (dropping the
//! receiver cancels the engine side), splits reasoning, parses tool calls, and yields deltas plus a final summary.

use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::reasoning::{Piece, ReasoningSplitter};
use crate::state::AppState;
use crate::stop::StopMatcher;
use crate::toolcall::{ToolCallParser, ToolEvent};
use crate::toolschema::ToolSchemas;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tensorfold_core::sampling::token_sha;
use tensorfold_core::tokenizer::{StreamDecoder, TextTokenizer};
use tensorfold_engine::{Event, FinishReason, TokenLogprob};
use tokio::sync::mpsc::UnboundedReceiver;

/// One piece of reply as it is produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    Content(String),
    Reasoning(String),
    Tool(ToolEvent),
}

/// A generated token with its log-probabilities.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenOut {
    pub id: u32,
    pub logprob: Option<TokenLogprob>,
}

/// The end of a reply.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    pub finish_reason: &'static str,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
    pub reasoning_tokens: usize,
    pub drafted: usize,
    pub accepted: usize,
    pub token_sha: String,
    pub first_token_secs: f64,
    pub total_secs: f64,
}

/// What one wake-up produced: new deltas and tokens, and the summary once the reply ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    pub deltas: Vec<Delta>,
    pub tokens: Vec<TokenOut>,
    pub finished: Option<Finished>,
}

/// How the reply text is read.
pub struct TextPlan {
    pub stop_strings: Vec<String>,
    /// Chat replies: the reasoning splitter (None = no reasoning parsing).
    pub reasoning: Option<ReasoningSplitter>,
    /// Chat replies with tools: the tool-call parser, seeded with `prefill`.
    pub tools: Option<ToolSchemas>,
    pub prefill: String,
    /// The request's end flag (`Request::end`): set when a stop string completes.
    pub end: Arc<AtomicBool>,
}

pub struct Generation {
    rx: Option<UnboundedReceiver<Event>>,
    state: AppState,
    decoder: Option<StreamDecoder>,
    stop: StopMatcher,
    splitter: Option<ReasoningSplitter>,
    tools: Option<ToolCallParser>,
    tokens: Vec<u32>,
    reasoning_tokens: usize,
    tool_calls: usize,
    prompt_tokens: usize,
    received: Instant,
    first_token: Option<f64>,
    last_token: Option<Instant>,
    done: bool,
    /// A stop string completed and the engine was asked to end: later tokens are dropped while its summary
    /// (with the usage) arrives.
    ending: bool,
    end: Arc<AtomicBool>,
    /// Deltas from the server's prefill, sent with the first step.
    pending_seed: Vec<Delta>,
}

impl Generation {
    pub fn new(
        state: AppState,
        rx: UnboundedReceiver<Event>,
        prompt_tokens: usize,
        received: Instant,
        plan: TextPlan,
    ) -> Self {
        let decoder = state
            .0
            .assets
            .tokenizer
            .as_ref()
            .map(|t: &TextTokenizer| StreamDecoder::new(t, true));
        let mut tools = plan.tools.map(ToolCallParser::new);
        let mut g = Generation {
            rx: Some(rx),
            state,
            decoder,
            stop: StopMatcher::new(plan.stop_strings),
            splitter: plan.reasoning,
            tools: None,
            tokens: Vec::new(),
            reasoning_tokens: 0,
            tool_calls: 0,
            prompt_tokens,
            received,
            first_token: None,
            last_token: None,
            done: false,
            ending: false,
            end: plan.end,
            pending_seed: Vec::new(),
        };
        if let Some(p) = tools.as_mut() {
            // The prefill is reply text the server wrote: it opens the parser's view of the reply.
            let events = p.push(&plan.prefill);
            g.tools = tools;
            let mut seeded = Vec::new();
            g.route_tool_events(events, &mut seeded);
            g.pending_seed = seeded;
        }
        g
    }

    fn metrics(&self) -> &Metrics {
        &self.state.0.metrics
    }

    /// Waits for the engine and returns what it produced; `Ok(None)` after the reply has ended.
    pub async fn next(&mut self) -> Result<Option<Step>, ApiError> {
        if self.done {
            return Ok(None);
        }
        let mut step = Step {
            deltas: std::mem::take(&mut self.pending_seed),
            ..Default::default()
        };
        let Some(rx) = self.rx.as_mut() else {
            return Ok(None);
        };
        let mut events = Vec::new();
        match rx.recv().await {
            Some(ev) => events.push(ev),
            None => {
                self.done = true;
                return Err(ApiError::internal(
                    "the engine stopped before the reply finished",
                ));
            }
        }
        // Take whatever else is ready so a burst of accepted drafts goes out as one chunk.
        while let Ok(ev) = rx.try_recv() {
            events.push(ev);
        }
        for ev in events {
            if self.done {
                break;
            }
            match ev {
                Event::Token { .. } if self.ending => {}
                Event::Token { id, logprob } => self.on_token(id, logprob, &mut step),
                Event::Done {
                    finish,
                    usage,
                    token_sha,
                    first_token_secs,
                    total_secs,
                } => {
                    if let Some(rest) = self.decoder.as_mut().and_then(|d| d.finish().ok()) {
                        self.on_text(&rest, &mut step);
                    }
                    if !self.done {
                        let reason = match finish {
                            // The last piece of text completed a stop string.
                            _ if self.stop.stopped() => "stop",
                            FinishReason::Stop => "stop",
                            FinishReason::Length => "length",
                            FinishReason::Cancelled => "cancelled",
                        };
                        let mut f = self.finish(reason, &mut step);
                        f.cached_tokens = usage.cached_tokens;
                        f.drafted = usage.drafted;
                        f.accepted = usage.accepted;
                        f.prompt_tokens = usage.prompt_tokens;
                        if !self.ending {
                            // (After a stop string the engine's hash covers tokens past it; ours does not.)
                            f.token_sha = token_sha;
                        }
                        f.first_token_secs = first_token_secs;
                        f.total_secs = total_secs;
                        step.finished = Some(f);
                    }
                }
                Event::Error(message) => {
                    self.done = true;
                    self.rx = None;
                    return Err(ApiError::internal(message));
                }
            }
        }
        Ok(Some(step))
    }

    fn on_token(&mut self, id: u32, logprob: Option<TokenLogprob>, step: &mut Step) {
        let now = Instant::now();
        match self.last_token {
            None => {
                let ttft = now.duration_since(self.received).as_secs_f64();
                self.first_token = Some(ttft);
                self.metrics().time_to_first_token.observe(ttft);
            }
            Some(prev) => self
                .metrics()
                .time_per_output_token
                .observe(now.duration_since(prev).as_secs_f64()),
        }
        self.last_token = Some(now);
        self.tokens.push(id);
        step.tokens.push(TokenOut { id, logprob });
        if self.splitter.as_ref().is_some_and(|s| s.in_reasoning()) {
            self.reasoning_tokens += 1;
        }
        // An id the tokenizer does not know (padded logits) decodes to nothing.
        let text = match self.decoder.as_mut() {
            Some(d) => d.step(id).ok().flatten().unwrap_or_default(),
            None => String::new(),
        };
        self.on_text(&text, step);
        if self.stop.stopped() && !self.done && !self.ending {
            // The engine ends the reply at its next round and sends its summary with the usage.
            self.end.store(true, Ordering::Release);
            self.ending = true;
        }
    }

    fn on_text(&mut self, text: &str, step: &mut Step) {
        if text.is_empty() {
            return;
        }
        let (emit, _) = self.stop.push(text);
        self.route(&emit, step);
    }

    /// Sends reply text through reasoning splitting and tool-call parsing.
    fn route(&mut self, text: &str, step: &mut Step) {
        if text.is_empty() {
            return;
        }
        let pieces = match self.splitter.as_mut() {
            Some(s) => s.push(text),
            None => vec![Piece::Content(text.to_owned())],
        };
        self.route_pieces(pieces, step);
    }

    fn route_pieces(&mut self, pieces: Vec<Piece>, step: &mut Step) {
        for piece in pieces {
            match piece {
                Piece::Reasoning(t) => step.deltas.push(Delta::Reasoning(t)),
                Piece::Content(t) => match self.tools.as_mut() {
                    Some(p) => {
                        let events = p.push(&t);
                        self.route_tool_events(events, &mut step.deltas);
                    }
                    None => step.deltas.push(Delta::Content(t)),
                },
            }
        }
    }

    fn route_tool_events(&mut self, events: Vec<ToolEvent>, deltas: &mut Vec<Delta>) {
        for ev in events {
            match ev {
                ToolEvent::Content(t) => deltas.push(Delta::Content(t)),
                ToolEvent::Start { .. } => {
                    self.tool_calls += 1;
                    deltas.push(Delta::Tool(ev));
                }
                ToolEvent::Broken { .. } => {
                    self.tool_calls = self.tool_calls.saturating_sub(1);
                    deltas.push(Delta::Tool(ev));
                }
                ToolEvent::Args { .. } => deltas.push(Delta::Tool(ev)),
            }
        }
    }

    /// Flushes every stage and builds the summary from what this side saw.
    fn finish(&mut self, engine_reason: &'static str, step: &mut Step) -> Finished {
        self.done = true;
        let held = self.stop.finish();
        if !self.stop.stopped() {
            self.route(&held, step);
        }
        if let Some(s) = self.splitter.as_mut() {
            let pieces = s.finish();
            self.route_pieces(pieces, step);
        }
        if let Some(p) = self.tools.as_mut() {
            let events = p.finish();
            self.route_tool_events(events, &mut step.deltas);
        }
        let reason = if engine_reason == "stop" && self.tool_calls > 0 {
            "tool_calls"
        } else {
            engine_reason
        };
        self.metrics().finished(reason);
        let total = self.received.elapsed().as_secs_f64();
        Finished {
            finish_reason: reason,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.tokens.len(),
            cached_tokens: 0,
            reasoning_tokens: self.reasoning_tokens,
            drafted: 0,
            accepted: 0,
            token_sha: token_sha(&self.tokens),
            first_token_secs: self.first_token.unwrap_or(total),
            total_secs: total,
        }
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.done {
            // The client went away: the receiver drops with us and the engine frees the slot.
            self.metrics().finished("cancelled");
        }
    }
}
