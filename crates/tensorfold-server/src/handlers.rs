//! POST /v1/completions and /v1/chat/completions: parse, build the prompt, submit to the engine (queue full →
//! 429, too long → 400 context_length_exceeded), then answer whole or as an SSE stream.

use crate::chat_request::{parse_chat, ChatRequest, ToolChoice};
use crate::error::ApiError;
use crate::generation::{Delta, Finished, Generation, TextPlan, TokenOut};
use crate::prompt::{build_chat_prompt, ChatPrompt};
use crate::reasoning::ReasoningSplitter;
use crate::request::{parse_completion, GenParams, Prompt};
use crate::respond::{
    chat_completion, chat_logprobs, completion_logprobs, json_response, new_id, text_completion,
    ResponseMeta,
};
use crate::state::{unix_now, AppState};
use crate::stream::{sse_response, Flavor, StreamOptions};
use crate::toolschema::ToolSchemas;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;
use tensorfold_core::sampling::{seed_from_prompt, SamplingParams};
use tensorfold_engine::Request;

/// A body the extractor refused (over the size limit → 413, unreadable → 400).
pub fn body_error(e: BytesRejection) -> ApiError {
    ApiError::body(
        e.status(),
        format!("could not read the request body: {}", e.body_text()),
    )
}

pub async fn completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let received = Instant::now();
    completions_inner(state, body, received)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

pub async fn chat_completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let received = Instant::now();
    chat_inner(state, body, received)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn completions_inner(
    state: AppState,
    body: Result<Bytes, BytesRejection>,
    received: Instant,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let req = parse_completion(&body, &state.limits())?;
    let ids = match req.prompt {
        Prompt::Ids(ids) => ids,
        Prompt::Text(text) => {
            let tok = state.0.assets.tokenizer.clone().ok_or_else(|| {
                ApiError::invalid(
                    "prompt",
                    "this checkpoint has no tokenizer: send the prompt as token ids",
                )
            })?;
            tokio::task::spawn_blocking(move || tok.encode(&text))
                .await
                .map_err(|e| ApiError::internal(format!("tokenizer task failed: {e}")))?
                .map_err(|e| {
                    ApiError::invalid("prompt", format!("could not tokenize the prompt: {e}"))
                })?
        }
    };
    let params = req.params;
    let (engine_req, end) = engine_request(&state, ids, &params, Vec::new(), "prompt")?;
    let prompt_tokens = engine_req.prompt.len();
    let prompt_ids = if params.return_token_ids {
        engine_req.prompt.clone()
    } else {
        Vec::new()
    };
    let rx = state
        .0
        .engine
        .submit(engine_req)
        .map_err(|e| ApiError::from_submit(e, "prompt"))?;
    let plan = TextPlan {
        stop_strings: params.stop_strings.clone(),
        reasoning: None,
        tools: None,
        prefill: String::new(),
        end,
    };
    let gen = Generation::new(state.clone(), rx, prompt_tokens, received, plan);
    let meta = meta(&state, "cmpl-");
    if params.stream {
        let opts = StreamOptions {
            flavor: Flavor::Completion,
            include_usage: params.include_usage,
            logprobs: params.logprobs.is_some(),
        };
        return Ok(sse_response(state, gen, meta, opts));
    }
    let (deltas, tokens, finished) = run_to_end(gen).await?;
    let text: String = deltas
        .into_iter()
        .filter_map(|d| match d {
            Delta::Content(t) | Delta::Reasoning(t) => Some(t),
            Delta::Tool(_) => None,
        })
        .collect();
    let tok = state.0.assets.tokenizer.as_ref();
    let logprobs = params
        .logprobs
        .map(|_| completion_logprobs(tok, &tokens, 0));
    let mut body = text_completion(&meta, &text, &finished, logprobs);
    add_token_ids(&mut body, &params, &tokens, prompt_ids);
    Ok(json_response(&body))
}

async fn chat_inner(
    state: AppState,
    body: Result<Bytes, BytesRejection>,
    received: Instant,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let req = parse_chat(&body, &state.limits())?;
    let (req, prompt) = render_chat(&state, req).await?;
    let params = &req.params;
    let tools_active = req.tool_choice != ToolChoice::None && !req.tools.is_empty();
    let (engine_req, end) =
        engine_request(&state, prompt.ids, params, prompt.cache_marks, "messages")?;
    let prompt_tokens = engine_req.prompt.len();
    let prompt_ids = if params.return_token_ids {
        engine_req.prompt.clone()
    } else {
        Vec::new()
    };
    let rx = state
        .0
        .engine
        .submit(engine_req)
        .map_err(|e| ApiError::from_submit(e, "messages"))?;
    let plan = TextPlan {
        stop_strings: params.stop_strings.clone(),
        reasoning: Some(ReasoningSplitter::new(
            prompt.starts_in_reasoning,
            tools_active,
        )),
        tools: tools_active.then(|| ToolSchemas::new(&req.tools)),
        prefill: prompt.prefill,
        end,
    };
    let gen = Generation::new(state.clone(), rx, prompt_tokens, received, plan);
    let meta = meta(&state, "chatcmpl-");
    if params.stream {
        let opts = StreamOptions {
            flavor: Flavor::Chat,
            include_usage: params.include_usage,
            logprobs: params.logprobs.is_some(),
        };
        return Ok(sse_response(state, gen, meta, opts));
    }
    let (deltas, tokens, finished) = run_to_end(gen).await?;
    let tok = state.0.assets.tokenizer.as_ref();
    let logprobs = params.logprobs.map(|_| chat_logprobs(tok, &tokens));
    let mut body = chat_completion(&meta, deltas, &finished, logprobs);
    add_token_ids(&mut body, params, &tokens, prompt_ids);
    Ok(json_response(&body))
}

/// Renders and tokenizes a chat request off the async workers (templates and tokenizers are CPU work).
pub async fn render_chat(
    state: &AppState,
    req: ChatRequest,
) -> Result<(ChatRequest, ChatPrompt), ApiError> {
    let assets = &state.0.assets;
    let (Some(tok), Some(template)) = (assets.tokenizer.clone(), assets.template.clone()) else {
        return Err(ApiError::invalid(
            "messages",
            "this checkpoint has no tokenizer or chat template: use /v1/completions with token ids",
        ));
    };
    tokio::task::spawn_blocking(move || {
        let prompt = build_chat_prompt(&req, &tok, &template)?;
        Ok((req, prompt))
    })
    .await
    .map_err(|e| ApiError::internal(format!("prompt task failed: {e}")))?
}

/// vLLM's `return_token_ids`: the prompt's and the reply's ids beside the text.
fn add_token_ids(
    body: &mut serde_json::Value,
    p: &GenParams,
    tokens: &[TokenOut],
    prompt_ids: Vec<u32>,
) {
    if p.return_token_ids {
        let ids: Vec<u32> = tokens.iter().map(|t| t.id).collect();
        body["choices"][0]["token_ids"] = serde_json::json!(ids);
        body["prompt_token_ids"] = serde_json::json!(prompt_ids);
    }
}

fn meta(state: &AppState, prefix: &str) -> ResponseMeta {
    ResponseMeta {
        id: new_id(prefix),
        created: unix_now(),
        model: state.0.options.model_name.clone(),
    }
}

/// Collects a whole reply.
async fn run_to_end(
    mut gen: Generation,
) -> Result<(Vec<Delta>, Vec<TokenOut>, Finished), ApiError> {
    let mut deltas = Vec::new();
    let mut tokens = Vec::new();
    while let Some(step) = gen.next().await? {
        deltas.extend(step.deltas);
        tokens.extend(step.tokens);
        if let Some(f) = step.finished {
            return Ok((deltas, tokens, f));
        }
    }
    Err(ApiError::internal("the reply ended without a summary"))
}

/// The engine request for `prompt`: length checks against the context, defaults filled in, stops merged; with
/// the flag that ends it early (set by the reply's stop-string matcher, so the engine still reports the usage).
pub fn engine_request(
    state: &AppState,
    prompt: Vec<u32>,
    p: &GenParams,
    cache_marks: Vec<usize>,
    param: &str,
) -> Result<(Request, Arc<AtomicBool>), ApiError> {
    let context = state.context();
    let n = prompt.len();
    if n == 0 {
        return Err(ApiError::invalid(param, "the prompt is empty"));
    }
    if n >= context {
        return Err(ApiError::context_length(
            param,
            format!("This server's maximum context length is {context} tokens; the prompt has {n} tokens, leaving no room for a reply"),
        ));
    }
    let room = context - n;
    let max_tokens = match p.max_tokens {
        Some(m) if n + m > context => {
            return Err(ApiError::context_length(
                param,
                format!("This server's maximum context length is {context} tokens; the request needs {} ({n} prompt + {m} max_tokens)", n + m),
            ))
        }
        Some(m) => m,
        None => state.0.options.max_tokens.unwrap_or(room).min(room),
    };
    let assets = &state.0.assets;
    let d = &assets.defaults;
    let seed = p.seed.unwrap_or_else(|| seed_from_prompt(&prompt));
    let mut r = Request::greedy(prompt, max_tokens);
    let mut sampling = SamplingParams::greedy();
    sampling.temperature = p.temperature.unwrap_or(d.temperature);
    sampling.top_k = p.top_k.unwrap_or(d.top_k);
    sampling.top_p = p.top_p.unwrap_or(d.top_p);
    sampling.min_p = p.min_p.unwrap_or(d.min_p);
    sampling.seed = seed;
    r.sampling = sampling;
    r.penalties = p.penalties(d.repetition_penalty);
    if p.ignore_eos && !p.stop_ids.is_empty() {
        // The engine's ignore_eos skips every stop id; keep the ones the request asked for.
        r.stop_ids = p.stop_ids.clone();
        r.ignore_eos = false;
    } else {
        r.stop_ids = assets.stop_ids.clone();
        r.stop_ids.extend(&p.stop_ids);
        r.ignore_eos = p.ignore_eos;
    }
    r.draft = p.draft;
    r.logprobs = p.logprobs;
    r.cache_marks = cache_marks;
    let end = Arc::<AtomicBool>::default();
    r.end = Some(end.clone());
    Ok((r, end))
}
