//! The small endpoints: /health, /v1/models, /metrics, /tokenize and /detokenize (vLLM field names), the JSON
//! 404/405 fallbacks, and the guard that checks API keys and counts responses.

use crate::chat_request::parse_chat;
use crate::error::ApiError;
use crate::fields::{parse_body, token_id, Fields};
use crate::handlers::{body_error, render_chat};
use crate::respond::{json_response, token_text};
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::sync::atomic::Ordering;

pub async fn health(State(state): State<AppState>) -> Response {
    let s = state.0.engine.stats();
    json_response(&json!({
        "status": "ok",
        "model": state.0.options.model_name,
        "context_length": state.context(),
        "parallel": state.0.engine.config().parallel,
        "requests_running": s.requests_running,
        "queue_depth": s.queue_depth,
        "prompt_tokens_total": s.prompt_tokens_total,
        "completion_tokens_total": s.completion_tokens_total,
        "drafted_total": s.drafted_total,
        "accepted_total": s.accepted_total,
    }))
}

pub async fn models(State(state): State<AppState>) -> Response {
    json_response(&json!({
        "object": "list",
        "data": [{
            "id": state.0.options.model_name,
            "object": "model",
            "created": state.0.created,
            "owned_by": "tensorfold",
            "max_model_len": state.context(),
        }],
    }))
}

pub async fn metrics(State(state): State<AppState>) -> Response {
    let text = state.0.metrics.render(&state.0.engine.stats());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub async fn tokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    tokenize_inner(state, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn tokenize_inner(
    state: AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let map = parse_body(&body)?;
    let f = Fields::new(&map);
    f.bool("add_special_tokens")?;
    let return_strs = f.bool("return_token_strs")?.unwrap_or(false);
    let ids =
        if f.get("messages").is_some() {
            let req = parse_chat(&body, &state.limits())?;
            render_chat(&state, req).await?.1.ids
        } else {
            let text = f
                .str("prompt")?
                .ok_or_else(|| ApiError::missing("prompt"))?
                .to_owned();
            let tok =
                state.0.assets.tokenizer.clone().ok_or_else(|| {
                    ApiError::invalid("prompt", "this checkpoint has no tokenizer")
                })?;
            tokio::task::spawn_blocking(move || tok.encode(&text))
                .await
                .map_err(|e| ApiError::internal(format!("tokenizer task failed: {e}")))?
                .map_err(|e| ApiError::invalid("prompt", format!("could not tokenize: {e}")))?
        };
    let tok = state.0.assets.tokenizer.as_ref();
    let strs = return_strs.then(|| {
        ids.iter()
            .map(|&id| token_text(tok, id))
            .collect::<Vec<_>>()
    });
    Ok(json_response(&json!({
        "count": ids.len(),
        "max_model_len": state.context(),
        "tokens": ids,
        "token_strs": strs,
    }))
    .into_response())
}

pub async fn detokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    detokenize_inner(state, body).unwrap_or_else(IntoResponse::into_response)
}

fn detokenize_inner(
    state: AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let map = parse_body(&body)?;
    let f = Fields::new(&map);
    let items = f
        .array("tokens")?
        .ok_or_else(|| ApiError::missing("tokens"))?;
    let tok = state
        .0
        .assets
        .tokenizer
        .as_ref()
        .ok_or_else(|| ApiError::invalid("tokens", "this checkpoint has no tokenizer"))?;
    let mut ids = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        ids.push(token_id(v, &format!("tokens[{i}]"), tok.vocab_size())?);
    }
    let text = tok
        .decode(&ids, false)
        .map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
    Ok(json_response(&json!({ "prompt": text })))
}

pub async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!("unknown path {}", req.uri().path()))
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}

/// Checks the API key (except on /health) and counts requests and error responses.
pub async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let m = &state.0.metrics;
    m.http_requests.fetch_add(1, Ordering::Relaxed);
    let keys = &state.0.options.api_keys;
    let resp =
        if !keys.is_empty() && req.uri().path() != "/health" && !authorized(req.headers(), keys) {
            ApiError::unauthorized().into_response()
        } else {
            next.run(req).await
        };
    let status = resp.status();
    if status.is_client_error() {
        m.http_errors_4xx.fetch_add(1, Ordering::Relaxed);
    } else if status.is_server_error() {
        m.http_errors_5xx.fetch_add(1, Ordering::Relaxed);
    }
    resp
}

fn authorized(headers: &HeaderMap, keys: &[String]) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, key) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
        });
    let x_api_key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    [bearer, x_api_key]
        .into_iter()
        .flatten()
        .any(|given| keys.iter().any(|k| same(k.as_bytes(), given.as_bytes())))
}

/// Compares without stopping at the first differing byte.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
