//! OpenAI response bodies: chat.completion and text_completion objects, their streaming chunks, usage with
//! cached/reasoning token details, logprobs in both flavours, and the `tensorfold` block {token_sha, drafted, accepted}.

use crate::generation::{Delta, Finished, TokenOut};
use crate::toolcall::{collect, ToolEvent};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use tensorfold_core::tokenizer::TextTokenizer;

/// Identity of one response: `id`, `created` and `model` repeat in every chunk.
#[derive(Clone, Debug)]
pub struct ResponseMeta {
    pub id: String,
    pub created: u64,
    pub model: String,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh hex id (unique per process, not guessable across restarts): `prefix` + 24 hex digits.
pub fn new_id(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let a = splitmix(nanos ^ n.rotate_left(32));
    let b = splitmix(a ^ n);
    format!("{prefix}{:016x}{:08x}", a, b as u32)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A 200 response with a JSON body.
pub fn json_response(v: &Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

pub fn usage_json(f: &Finished) -> Value {
    json!({
        "prompt_tokens": f.prompt_tokens,
        "completion_tokens": f.completion_tokens,
        "total_tokens": f.prompt_tokens + f.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": f.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": f.reasoning_tokens},
    })
}

pub fn tensorfold_json(f: &Finished) -> Value {
    json!({
        "token_sha": f.token_sha,
        "drafted": f.drafted,
        "accepted": f.accepted,
        "first_token_secs": f.first_token_secs,
        "total_secs": f.total_secs,
    })
}

/// Text of one token for logprobs (its decoded text, or `<id:N>` when the tokenizer cannot say).
pub fn token_text(tok: Option<&TextTokenizer>, id: u32) -> String {
    tok.and_then(|t| t.decode(&[id], false).ok())
        .unwrap_or_else(|| format!("<id:{id}>"))
}

/// JSON cannot carry -inf: clamp as vLLM does.
fn finite(lp: f32) -> f64 {
    if lp.is_finite() {
        lp as f64
    } else {
        -9999.0
    }
}

/// Chat logprobs: `{"content": [{token, logprob, bytes, top_logprobs: [...]}]}`.
pub fn chat_logprobs(tok: Option<&TextTokenizer>, tokens: &[TokenOut]) -> Value {
    let entry = |id: u32, lp: f32| {
        let text = token_text(tok, id);
        let bytes: Vec<u8> = text.as_bytes().to_vec();
        json!({"token": text, "logprob": finite(lp), "bytes": bytes})
    };
    let content: Vec<Value> = tokens
        .iter()
        .filter_map(|t| {
            let lp = t.logprob.as_ref()?;
            let mut e = entry(t.id, lp.logprob);
            e["top_logprobs"] = Value::Array(lp.top.iter().map(|&(id, l)| entry(id, l)).collect());
            Some(e)
        })
        .collect();
    json!({ "content": content })
}

/// Legacy completions logprobs: `{tokens, token_logprobs, top_logprobs, text_offset}`; `offset` is the text
/// length before these tokens.
pub fn completion_logprobs(
    tok: Option<&TextTokenizer>,
    tokens: &[TokenOut],
    offset: usize,
) -> Value {
    let mut texts = Vec::new();
    let mut lps = Vec::new();
    let mut tops = Vec::new();
    let mut offsets = Vec::new();
    let mut at = offset;
    for t in tokens {
        let Some(lp) = t.logprob.as_ref() else {
            continue;
        };
        let text = token_text(tok, t.id);
        offsets.push(at);
        at += text.len();
        texts.push(text);
        lps.push(finite(lp.logprob));
        let mut top = Map::new();
        for &(id, l) in &lp.top {
            top.insert(token_text(tok, id), json!(finite(l)));
        }
        tops.push(Value::Object(top));
    }
    json!({"tokens": texts, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets})
}

/// The complete chat.completion object.
pub fn chat_completion(
    meta: &ResponseMeta,
    deltas: Vec<Delta>,
    finished: &Finished,
    logprobs: Option<Value>,
) -> Value {
    let mut reasoning = String::new();
    let mut events = Vec::new();
    for d in deltas {
        match d {
            Delta::Reasoning(t) => reasoning.push_str(&t),
            Delta::Content(t) => events.push(ToolEvent::Content(t)),
            Delta::Tool(ev) => events.push(ev),
        }
    }
    let (content, calls) = collect(events);
    let mut message = json!({"role": "assistant"});
    let content_value = if calls.is_empty() {
        json!(content)
    } else if content.trim().is_empty() {
        Value::Null
    } else {
        // The template separates prose from the call with blank lines; they are not part of the answer.
        json!(content.trim_end())
    };
    message["content"] = content_value;
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
        message["reasoning"] = json!(reasoning);
    }
    let finish_reason = if calls.is_empty() && finished.finish_reason == "tool_calls" {
        "stop"
    } else {
        finished.finish_reason
    };
    if !calls.is_empty() {
        let list: Vec<Value> = calls
            .into_iter()
            .map(|c| {
                json!({"id": new_id("call_"), "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        message["tool_calls"] = Value::Array(list);
    }
    json!({
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
        }],
        "usage": usage_json(finished),
        "tensorfold": tensorfold_json(finished),
    })
}

/// The complete text_completion object.
pub fn text_completion(
    meta: &ResponseMeta,
    text: &str,
    finished: &Finished,
    logprobs: Option<Value>,
) -> Value {
    json!({
        "id": meta.id,
        "object": "text_completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finished.finish_reason}],
        "usage": usage_json(finished),
        "tensorfold": tensorfold_json(finished),
    })
}

/// One chat.completion.chunk with a single choice.
pub fn chat_chunk(
    meta: &ResponseMeta,
    delta: Value,
    finish_reason: Option<&str>,
    logprobs: Option<Value>,
    usage_null: bool,
) -> Value {
    let mut v = json!({
        "id": meta.id,
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": meta.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
    });
    if usage_null {
        v["usage"] = Value::Null;
    }
    v
}

/// One text_completion chunk.
pub fn completion_chunk(
    meta: &ResponseMeta,
    text: &str,
    finish_reason: Option<&str>,
    logprobs: Option<Value>,
    usage_null: bool,
) -> Value {
    let mut v = json!({
        "id": meta.id,
        "object": "text_completion",
        "created": meta.created,
        "model": meta.model,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
    });
    if usage_null {
        v["usage"] = Value::Null;
    }
    v
}

/// The chunk with usage and no choices (`stream_options.include_usage`).
pub fn usage_chunk(meta: &ResponseMeta, object: &str, finished: &Finished) -> Value {
    json!({
        "id": meta.id,
        "object": object,
        "created": meta.created,
        "model": meta.model,
        "choices": [],
        "usage": usage_json(finished),
        "tensorfold": tensorfold_json(finished),
    })
}
