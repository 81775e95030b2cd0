//! SSE streaming per OpenAI: role first, content / reasoning / tool-call deltas as they are written, a final chunk
//! with finish_reason, usage when asked, an error event if the reply fails mid-stream, then `data: [DONE]`.

use crate::generation::{Delta, Finished, Generation, TokenOut};
use crate::respond::{
    chat_chunk, chat_logprobs, completion_chunk, completion_logprobs, new_id, tensorfold_json,
    usage_chunk, ResponseMeta,
};
use crate::state::AppState;
use crate::toolcall::ToolEvent;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Chat,
    Completion,
}

pub struct StreamOptions {
    pub flavor: Flavor,
    pub include_usage: bool,
    pub logprobs: bool,
}

struct SseState {
    gen: Generation,
    state: AppState,
    meta: ResponseMeta,
    opts: StreamOptions,
    started: bool,
    finished: bool,
    done_sent: bool,
    tool_ids: HashMap<usize, String>,
    /// Tokens whose logprobs are not sent yet (their text may still be held back).
    pending: Vec<TokenOut>,
    text_offset: usize,
}

impl Drop for SseState {
    fn drop(&mut self) {
        self.state
            .0
            .metrics
            .streams_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// The SSE response for a submitted request; dropping it (client gone) drops the engine receiver.
pub fn sse_response(
    state: AppState,
    gen: Generation,
    meta: ResponseMeta,
    opts: StreamOptions,
) -> Response {
    state.0.metrics.streams_open.fetch_add(1, Ordering::Relaxed);
    let st = SseState {
        gen,
        state,
        meta,
        opts,
        started: false,
        finished: false,
        done_sent: false,
        tool_ids: HashMap::new(),
        pending: Vec::new(),
        text_offset: 0,
    };
    let events = stream::unfold(st, |mut st| async move {
        if st.done_sent {
            return None;
        }
        if st.finished {
            st.done_sent = true;
            return Some((vec![Event::default().data("[DONE]")], st));
        }
        if !st.started {
            st.started = true;
            if st.opts.flavor == Flavor::Chat {
                let first = chat_chunk(
                    &st.meta,
                    json!({"role": "assistant", "content": ""}),
                    None,
                    None,
                    st.opts.include_usage,
                );
                return Some((vec![data(&first)], st));
            }
        }
        let events = match st.gen.next().await {
            Ok(Some(step)) => {
                let mut evs = st.step_events(step.deltas, step.tokens);
                if let Some(f) = step.finished {
                    evs.extend(st.final_events(&f));
                    st.finished = true;
                }
                evs
            }
            Ok(None) => {
                st.finished = true;
                Vec::new()
            }
            Err(e) => {
                st.finished = true;
                vec![data(&e.to_json())]
            }
        };
        Some((events, st))
    })
    .flat_map(|evs| stream::iter(evs.into_iter().map(Ok::<_, Infallible>)));
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response()
}

impl SseState {
    fn logprobs_value(&mut self, force: bool) -> Option<Value> {
        if !self.opts.logprobs || (self.pending.is_empty() && !force) {
            return None;
        }
        let tokens = std::mem::take(&mut self.pending);
        let tok = self.state.0.assets.tokenizer.as_ref();
        Some(match self.opts.flavor {
            Flavor::Chat => chat_logprobs(tok, &tokens),
            Flavor::Completion => completion_logprobs(tok, &tokens, self.text_offset),
        })
    }

    /// Chunks for one step's deltas; consecutive deltas of one kind are merged.
    fn step_events(&mut self, deltas: Vec<Delta>, tokens: Vec<TokenOut>) -> Vec<Event> {
        self.pending.extend(tokens);
        let usage_null = self.opts.include_usage;
        let mut out = Vec::new();
        match self.opts.flavor {
            Flavor::Completion => {
                let text: String = deltas
                    .into_iter()
                    .filter_map(|d| match d {
                        Delta::Content(t) | Delta::Reasoning(t) => Some(t),
                        Delta::Tool(_) => None,
                    })
                    .collect();
                if !text.is_empty() {
                    let lp = self.logprobs_value(false);
                    out.push(data(&completion_chunk(
                        &self.meta, &text, None, lp, usage_null,
                    )));
                    self.text_offset += text.len();
                }
            }
            Flavor::Chat => {
                for delta in merge(deltas) {
                    let Some(d) = self.chat_delta(delta) else {
                        continue;
                    };
                    let lp = self.logprobs_value(false);
                    out.push(data(&chat_chunk(&self.meta, d, None, lp, usage_null)));
                }
            }
        }
        out
    }

    fn chat_delta(&mut self, delta: Delta) -> Option<Value> {
        Some(match delta {
            Delta::Content(t) => json!({"content": t}),
            Delta::Reasoning(t) => json!({"reasoning_content": t, "reasoning": t}),
            Delta::Tool(ToolEvent::Start { index, name }) => {
                let id = new_id("call_");
                self.tool_ids.insert(index, id.clone());
                json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                       "function": {"name": name, "arguments": ""}}]})
            }
            Delta::Tool(ToolEvent::Args { index, fragment }) => {
                json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
            }
            // Already streamed as a call; the text after it follows as content.
            Delta::Tool(ToolEvent::Broken { .. }) | Delta::Tool(ToolEvent::Content(_)) => {
                return None
            }
        })
    }

    fn final_events(&mut self, f: &Finished) -> Vec<Event> {
        let usage_null = self.opts.include_usage;
        let lp = self.logprobs_value(false);
        let mut last = match self.opts.flavor {
            Flavor::Chat => {
                chat_chunk(&self.meta, json!({}), Some(f.finish_reason), lp, usage_null)
            }
            Flavor::Completion => {
                completion_chunk(&self.meta, "", Some(f.finish_reason), lp, usage_null)
            }
        };
        last["tensorfold"] = tensorfold_json(f);
        let mut out = vec![data(&last)];
        if self.opts.include_usage {
            let object = match self.opts.flavor {
                Flavor::Chat => "chat.completion.chunk",
                Flavor::Completion => "text_completion",
            };
            out.push(data(&usage_chunk(&self.meta, object, f)));
        }
        out
    }
}

/// Joins neighbouring content (or reasoning) deltas so a burst of tokens is one chunk.
fn merge(deltas: Vec<Delta>) -> Vec<Delta> {
    let mut out: Vec<Delta> = Vec::with_capacity(deltas.len());
    for d in deltas {
        match (out.last_mut(), d) {
            (Some(Delta::Content(a)), Delta::Content(b))
            | (Some(Delta::Reasoning(a)), Delta::Reasoning(b)) => a.push_str(&b),
            (
                Some(Delta::Tool(ToolEvent::Args {
                    index: i,
                    fragment: a,
                })),
                Delta::Tool(ToolEvent::Args {
                    index: j,
                    fragment: b,
                }),
            ) if *i == j => a.push_str(&b),
            (_, d) => out.push(d),
        }
    }
    out
}
