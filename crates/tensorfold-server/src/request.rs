//! Request parsing shared by /v1/completions and /v1/chat/completions: sampling, penalties, stops, streaming and
//! logprob fields, validated into typed values (wrong types and ranges → 400 naming the parameter, never a panic).

use crate::error::ApiError;
use crate::fields::{as_integer, parse_body, token_id, Fields};
use serde_json::Value;
use tensorfold_engine::Penalties;

/// Longest stop list and stop string accepted (vLLM has no limit; a bound keeps matching cheap).
const MAX_STOPS: usize = 64;
const MAX_STOP_CHARS: usize = 1024;
/// Most alternatives per position for logprobs (OpenAI allows 20).
pub const MAX_TOP_LOGPROBS: i128 = 20;

/// What the request parser needs to know about the served model.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The model's vocabulary (token ids must be below it).
    pub vocab: usize,
    /// Largest `max_tokens` a request may ask for.
    pub max_tokens: usize,
}

/// Sampling, stopping and output options common to both generation endpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct GenParams {
    pub max_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// 0 = no top-k cut.
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub repetition_penalty: Option<f32>,
    /// Stop strings, matched on the decoded text in the server.
    pub stop_strings: Vec<String>,
    /// Stop token ids, matched in the engine.
    pub stop_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub include_usage: bool,
    /// Alternatives per position when logprobs were asked for.
    pub logprobs: Option<usize>,
    /// `"draft": false` serves this request without drafts.
    pub draft: bool,
    /// vLLM's `return_token_ids`: the reply's token ids in the (non-streamed) choice.
    pub return_token_ids: bool,
}

impl GenParams {
    pub fn penalties(&self, default_repetition: f32) -> Penalties {
        Penalties {
            presence: self.presence_penalty,
            frequency: self.frequency_penalty,
            repetition: self.repetition_penalty.unwrap_or(default_repetition),
        }
    }
}

/// A /v1/completions prompt: text to tokenize, or token ids run as given.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    pub params: GenParams,
}

/// Parses the fields both endpoints share; `chat` selects the chat flavour of `logprobs` and `max_tokens`.
pub fn parse_gen_params(f: &Fields, chat: bool, limits: &Limits) -> Result<GenParams, ApiError> {
    if let Some(n) = f.int("n", i128::MIN, i128::MAX)? {
        if n != 1 {
            return Err(ApiError::unsupported(
                "n",
                format!("'n' must be 1 (one choice per request), got {n}"),
            ));
        }
    }
    let max_key = if chat && f.get("max_completion_tokens").is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    let max_tokens = match f.int(max_key, i128::MIN, i128::MAX)? {
        None => None,
        Some(n) if n < 1 || n > limits.max_tokens as i128 => {
            return Err(ApiError::invalid(
                max_key,
                format!(
                    "'{max_key}' must be between 1 and {} (this server's limit), got {n}",
                    limits.max_tokens
                ),
            ))
        }
        Some(n) => Some(n as usize),
    };
    let temperature = f.number("temperature", 0.0, 100.0)?.map(|x| x as f32);
    let top_p = f.number("top_p", 0.0, 1.0)?.map(|x| x as f32);
    if top_p == Some(0.0) {
        return Err(ApiError::invalid(
            "top_p",
            "'top_p' must be in (0, 1], got 0",
        ));
    }
    // vLLM: -1 (or 0) turns top-k off.
    let top_k = f
        .int("top_k", -1, u32::MAX as i128)?
        .map(|k| k.max(0) as usize);
    let min_p = f.number("min_p", 0.0, 1.0)?.map(|x| x as f32);
    let seed = f.int("seed", i64::MIN as i128, u64::MAX as i128)?.map(|s| {
        if s < 0 {
            s as i64 as u64
        } else {
            s as u64
        }
    });
    let presence_penalty = f.number("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0) as f32;
    let frequency_penalty = f.number("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0) as f32;
    let repetition_penalty = f
        .number("repetition_penalty", 0.0, 100.0)?
        .map(|x| x as f32);
    if repetition_penalty == Some(0.0) {
        return Err(ApiError::invalid(
            "repetition_penalty",
            "'repetition_penalty' must be > 0 (1 = off), got 0",
        ));
    }
    let (stop_strings, mut stop_ids) = parse_stop(f, limits)?;
    if let Some(ids) = f.array("stop_token_ids")? {
        for (i, v) in ids.iter().enumerate() {
            stop_ids.push(token_id(v, &format!("stop_token_ids[{i}]"), limits.vocab)?);
        }
    }
    let ignore_eos = f.bool("ignore_eos")?.unwrap_or(false);
    let stream = f.bool("stream")?.unwrap_or(false);
    let mut include_usage = false;
    if let Some(opts) = f.nested("stream_options")? {
        if !stream {
            return Err(ApiError::invalid(
                "stream_options",
                "'stream_options' is only allowed when 'stream' is true",
            ));
        }
        include_usage = opts.bool("include_usage")?.unwrap_or(false);
        opts.bool("continuous_usage_stats")?;
    }
    let logprobs = if chat {
        let on = f.bool("logprobs")?.unwrap_or(false);
        let top = f.int("top_logprobs", 0, MAX_TOP_LOGPROBS)?;
        match (on, top) {
            (false, Some(t)) if t > 0 => {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "'top_logprobs' needs 'logprobs': true",
                ))
            }
            (true, t) => Some(t.unwrap_or(0) as usize),
            _ => None,
        }
    } else {
        f.int("logprobs", 0, MAX_TOP_LOGPROBS)?.map(|n| n as usize)
    };
    let draft = f.bool("draft")?.unwrap_or(true);
    let return_token_ids = f.bool("return_token_ids")?.unwrap_or(false);
    reject_unsupported(f)?;
    Ok(GenParams {
        max_tokens,
        temperature,
        top_p,
        top_k,
        min_p,
        seed,
        presence_penalty,
        frequency_penalty,
        repetition_penalty,
        stop_strings,
        stop_ids,
        ignore_eos,
        stream,
        include_usage,
        logprobs,
        draft,
        return_token_ids,
    })
}

/// `stop`: a string, or a list of strings and token ids.
fn parse_stop(f: &Fields, limits: &Limits) -> Result<(Vec<String>, Vec<u32>), ApiError> {
    let mut strings = Vec::new();
    let mut ids = Vec::new();
    let items: Vec<&Value> = match f.get("stop") {
        None => return Ok((strings, ids)),
        Some(v @ Value::String(_)) => vec![v],
        Some(Value::Array(a)) => a.iter().collect(),
        Some(v) => {
            return Err(ApiError::wrong_type(
                "stop",
                "a string or an array of strings and token ids",
                v,
            ))
        }
    };
    if items.len() > MAX_STOPS {
        return Err(ApiError::invalid(
            "stop",
            format!("at most {MAX_STOPS} stop sequences, got {}", items.len()),
        ));
    }
    for (i, v) in items.into_iter().enumerate() {
        match v {
            Value::String(s) if s.is_empty() => {
                return Err(ApiError::invalid("stop", "stop strings must not be empty"))
            }
            Value::String(s) if s.chars().count() > MAX_STOP_CHARS => {
                return Err(ApiError::invalid(
                    "stop",
                    format!("stop strings are limited to {MAX_STOP_CHARS} characters"),
                ))
            }
            Value::String(s) => strings.push(s.clone()),
            Value::Number(_) => ids.push(token_id(v, &format!("stop[{i}]"), limits.vocab)?),
            other => {
                return Err(ApiError::wrong_type(
                    &format!("stop[{i}]"),
                    "a string or a token id",
                    other,
                ))
            }
        }
    }
    Ok((strings, ids))
}

/// Known OpenAI fields this server does not implement get a 400 instead of being silently ignored.
fn reject_unsupported(f: &Fields) -> Result<(), ApiError> {
    if let Some(bias) = f.object("logit_bias")? {
        if !bias.is_empty() {
            return Err(ApiError::unsupported(
                "logit_bias",
                "'logit_bias' is not supported by this server",
            ));
        }
    }
    if let Some(rf) = f.nested("response_format")? {
        match rf.str("type")? {
            None | Some("text") => {}
            Some(other) => {
                return Err(ApiError::unsupported(
                    "response_format",
                    format!("response_format type '{other}' is not supported (no grammar-constrained decoding yet); only 'text'"),
                ))
            }
        }
    }
    if let Some(b) = f.int("best_of", i128::MIN, i128::MAX)? {
        if b != 1 {
            return Err(ApiError::unsupported("best_of", "'best_of' must be 1"));
        }
    }
    if f.bool("echo")? == Some(true) {
        return Err(ApiError::unsupported(
            "echo",
            "'echo' is not supported by this server",
        ));
    }
    if let Some(s) = f.str("suffix")? {
        if !s.is_empty() {
            return Err(ApiError::unsupported(
                "suffix",
                "'suffix' is not supported by this server",
            ));
        }
    }
    f.str("model")?;
    f.str("user")?;
    Ok(())
}

/// Parses a /v1/completions body.
pub fn parse_completion(body: &[u8], limits: &Limits) -> Result<CompletionRequest, ApiError> {
    let map = parse_body(body)?;
    let f = Fields::new(&map);
    let prompt = parse_prompt(f.get("prompt"), limits)?;
    let params = parse_gen_params(&f, false, limits)?;
    Ok(CompletionRequest { prompt, params })
}

/// `prompt`: a string, a list of token ids, or a one-element list of either.
fn parse_prompt(value: Option<&Value>, limits: &Limits) -> Result<Prompt, ApiError> {
    let expected = "a string or an array of token ids";
    let Some(value) = value else {
        return Err(ApiError::missing("prompt"));
    };
    match value {
        Value::String(s) if s.is_empty() => Err(ApiError::invalid("prompt", "the prompt is empty")),
        Value::String(s) => Ok(Prompt::Text(s.clone())),
        Value::Array(items) if items.is_empty() => {
            Err(ApiError::invalid("prompt", "the prompt is empty"))
        }
        Value::Array(items) if items.iter().all(|v| v.is_number()) => {
            let mut ids = Vec::with_capacity(items.len());
            for (i, v) in items.iter().enumerate() {
                ids.push(token_id(v, &format!("prompt[{i}]"), limits.vocab)?);
            }
            Ok(Prompt::Ids(ids))
        }
        Value::Array(items)
            if items.len() == 1 && (items[0].is_string() || items[0].is_array()) =>
        {
            parse_prompt(Some(&items[0]), limits)
        }
        Value::Array(items) if items.iter().all(|v| v.is_string() || v.is_array()) => {
            Err(ApiError::unsupported(
                "prompt",
                "batched prompts are not supported: send one prompt per request",
            ))
        }
        Value::Array(items) => {
            let (i, bad) = items
                .iter()
                .enumerate()
                .find(|(_, v)| as_integer(v).is_none())
                .unwrap_or((0, value));
            Err(ApiError::wrong_type(
                &format!("prompt[{i}]"),
                "a token id (integer)",
                bad,
            ))
        }
        other => Err(ApiError::wrong_type("prompt", expected, other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        vocab: 512,
        max_tokens: 100,
    };

    #[test]
    fn every_known_field_maps_to_its_typed_value() {
        let body = br#"{"prompt": [1, 2, 3], "max_tokens": 16.0, "temperature": 0.5, "top_p": 0.9, "top_k": -1,
            "min_p": 0.05, "seed": -1, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
            "stop": ["END", 7], "stop_token_ids": [9], "ignore_eos": true, "stream": true,
            "stream_options": {"include_usage": true}, "logprobs": 3, "draft": false, "n": 1, "user": "u",
            "unknown_field": {"ignored": true}}"#;
        let r = parse_completion(body, &LIMITS).expect("a valid request");
        assert_eq!(r.prompt, Prompt::Ids(vec![1, 2, 3]));
        let p = r.params;
        assert_eq!(p.max_tokens, Some(16));
        assert_eq!(
            (p.temperature, p.top_p, p.top_k, p.min_p),
            (Some(0.5), Some(0.9), Some(0), Some(0.05))
        );
        assert_eq!(p.seed, Some(u64::MAX));
        assert_eq!(p.penalties(1.0).repetition, 1.1);
        assert_eq!(p.stop_strings, vec!["END".to_owned()]);
        assert_eq!(p.stop_ids, vec![7, 9]);
        assert!(p.ignore_eos && p.stream && p.include_usage && !p.draft);
        assert_eq!(p.logprobs, Some(3));
    }

    #[test]
    fn a_one_element_prompt_list_is_unwrapped_and_nulls_read_as_absent() {
        let r = parse_completion(
            br#"{"prompt": ["hi"], "max_tokens": null, "stop": null}"#,
            &LIMITS,
        )
        .expect("a valid request");
        assert_eq!(r.prompt, Prompt::Text("hi".into()));
        assert_eq!(r.params.max_tokens, None);
    }
}
