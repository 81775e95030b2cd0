//! The server over real HTTP on 127.0.0.1 with the tiny fixture: endpoints, completions from text and ids, chat,
//! streaming, stops, logprobs, tools, and the exactness promises (concurrent == solo, draft:false == drafted).

mod common;

use common::{collect_stream, get, post, shared};
use serde_json::{json, Value};

fn completion(body: Value) -> Value {
    let r = post(shared(), "/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn chat(body: Value) -> Value {
    let r = post(shared(), "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn sha(v: &Value) -> String {
    v["tensorfold"]["token_sha"]
        .as_str()
        .expect("token_sha")
        .to_owned()
}

#[test]
fn health_models_and_metrics_answer() {
    let h = get(shared(), "/health");
    assert_eq!(h.status, 200);
    assert_eq!(h.json()["status"], "ok");
    let m = get(shared(), "/v1/models").json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "tiny");
    completion(json!({"prompt": "warm", "max_tokens": 2}));
    let metrics = get(shared(), "/metrics");
    assert_eq!(metrics.status, 200);
    let text = metrics.text();
    for name in [
        "tensorfold_http_requests_total",
        "tensorfold_num_requests_waiting",
        "tensorfold_prompt_cache_hits_total",
        "tensorfold_draft_tokens_total",
        "tensorfold_accepted_tokens_total",
        "tensorfold_time_to_first_token_seconds_bucket",
        "tensorfold_time_per_output_token_seconds_count",
    ] {
        assert!(text.contains(name), "missing {name}");
    }
}

#[test]
fn a_text_completion_has_the_openai_shape() {
    let v = completion(
        json!({"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 8,
                               "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(v["object"], "text_completion");
    assert!(v["id"].as_str().is_some_and(|id| id.starts_with("cmpl-")));
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert!(v["choices"][0]["text"].is_string());
    assert_eq!(v["usage"]["completion_tokens"], 8);
    assert_eq!(
        v["usage"]["total_tokens"],
        v["usage"]["prompt_tokens"].as_u64().unwrap_or(0) + 8
    );
    assert!(v["usage"]["prompt_tokens_details"]["cached_tokens"].is_u64());
    assert_eq!(sha(&v).len(), 12);
    assert!(v["tensorfold"]["drafted"].is_u64() && v["tensorfold"]["accepted"].is_u64());
}

#[test]
fn a_prompt_of_token_ids_runs_as_given_and_equals_the_text_prompt() {
    let tok = post(
        shared(),
        "/tokenize",
        &json!({"prompt": "Once upon a time"}),
    )
    .json();
    let ids = tok["tokens"].clone();
    assert_eq!(tok["count"], ids.as_array().map_or(0, Vec::len));
    let back = post(shared(), "/v1/detokenize", &json!({"tokens": ids})).json();
    assert_eq!(back["prompt"], "Once upon a time");
    let body = |prompt: Value| json!({"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": true, "return_token_ids": true});
    let from_ids = completion(body(ids.clone()));
    let from_text = completion(body(json!("Once upon a time")));
    assert_eq!(from_ids["prompt_token_ids"], ids);
    assert_eq!(sha(&from_ids), sha(&from_text));
    assert_eq!(
        from_ids["choices"][0]["text"],
        from_text["choices"][0]["text"]
    );
    // Ids the tokenizer lacks but the model has still run as given.
    let raw = completion(json!({"prompt": [505, 1, 2], "max_tokens": 3, "ignore_eos": true}));
    assert_eq!(raw["usage"]["prompt_tokens"], 3);
}

#[test]
fn a_chat_reply_starts_in_reasoning_after_the_templates_open_think_block() {
    let v = chat(
        json!({"messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "developer", "content": "No lists."},
                                      {"role": "user", "content": "Hi"}],
                        "max_completion_tokens": 12, "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(v["object"], "chat.completion");
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["role"], "assistant");
    // The fixture's template opens <think>; random weights never close it in 12 tokens (or rarely do).
    let reasoning = msg["reasoning_content"].as_str().unwrap_or("");
    let content = msg["content"].as_str().unwrap_or("");
    assert!(!reasoning.is_empty() || !content.is_empty());
    let r = v["usage"]["completion_tokens_details"]["reasoning_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(r <= 12);
}

#[test]
fn thinking_off_puts_the_reply_in_content() {
    let v = chat(
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0,
                        "ignore_eos": true, "chat_template_kwargs": {"enable_thinking": false}}),
    );
    let msg = &v["choices"][0]["message"];
    assert_eq!(
        v["usage"]["completion_tokens_details"]["reasoning_tokens"],
        0
    );
    assert!(msg.get("reasoning_content").is_none() || msg["reasoning_content"].is_null());
}

#[test]
fn a_streamed_chat_equals_the_whole_reply() {
    let body = json!({"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 20,
                      "temperature": 0.7, "seed": 3, "ignore_eos": true});
    let whole = chat(body.clone());
    let mut sbody = body;
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let r = post(shared(), "/v1/chat/completions", &sbody);
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream")));
    let s = collect_stream(&r);
    assert_eq!(s.chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(s.chunks[0]["object"], "chat.completion.chunk");
    let msg = &whole["choices"][0]["message"];
    assert_eq!(s.content, msg["content"].as_str().unwrap_or(""));
    assert_eq!(s.reasoning, msg["reasoning_content"].as_str().unwrap_or(""));
    assert_eq!(s.finish_reason.as_deref(), Some("length"));
    assert_eq!(s.tensorfold["token_sha"], whole["tensorfold"]["token_sha"]);
    let usage = s.usage.expect("usage chunk");
    assert_eq!(usage["completion_tokens"], 20);
    let last = &s.chunks[s.chunks.len() - 1];
    assert_eq!(last["choices"], json!([]));
    assert!(s.chunks[..s.chunks.len() - 1]
        .iter()
        .all(|c| c.get("usage") == Some(&Value::Null)));
}

#[test]
fn a_streamed_completion_without_usage_has_no_usage_field() {
    let r = post(
        shared(),
        "/v1/completions",
        &json!({"prompt": "abc", "max_tokens": 5, "stream": true,
                                                      "ignore_eos": true, "temperature": 0}),
    );
    let s = collect_stream(&r);
    assert!(s.usage.is_none());
    assert!(s.chunks.iter().all(|c| c.get("usage").is_none()));
    let whole =
        completion(json!({"prompt": "abc", "max_tokens": 5, "ignore_eos": true, "temperature": 0}));
    assert_eq!(s.text, whole["choices"][0]["text"].as_str().unwrap_or(""));
}

#[test]
fn concurrent_replies_equal_solo_replies_greedy_and_seeded() {
    for (temperature, seed) in [(0.0, 0), (0.9, 42)] {
        let body = |prompt: &str| {
            json!({"prompt": prompt, "max_tokens": 24, "temperature": temperature, "seed": seed,
                   "ignore_eos": true, "top_k": 50})
        };
        let prompts = [
            "fn main() {",
            "Dear diary,",
            "SELECT * FROM",
            "The weather today",
        ];
        let solo: Vec<String> = prompts.iter().map(|p| sha(&completion(body(p)))).collect();
        let together: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = prompts
                .iter()
                .map(|p| s.spawn(move || sha(&completion(body(p)))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("client thread"))
                .collect()
        });
        assert_eq!(solo, together, "temperature {temperature}");
    }
}

#[test]
fn draft_false_gives_the_same_reply_as_drafts() {
    for stream_prompt in ["ab ab ab ab ab ab ab", "1 2 3 1 2 3 1 2 3"] {
        let body = |draft: bool| {
            json!({"prompt": stream_prompt, "max_tokens": 32, "temperature": 0, "ignore_eos": true,
                   "draft": draft})
        };
        let drafted = completion(body(true));
        let plain = completion(body(false));
        assert_eq!(sha(&drafted), sha(&plain));
        assert_eq!(plain["tensorfold"]["drafted"], 0);
    }
}

#[test]
fn a_stop_string_cuts_the_text_and_finishes_with_stop() {
    let base =
        json!({"prompt": "Hello there", "max_tokens": 40, "temperature": 0, "ignore_eos": true});
    let full = completion(base.clone());
    let text = full["choices"][0]["text"].as_str().unwrap_or("").to_owned();
    // A stop string from the middle of the reply, made of plain characters.
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let (start, stop) = (5..chars.len().saturating_sub(3))
        .find_map(|i| {
            let s: String = chars[i..i + 3].iter().map(|(_, c)| *c).collect();
            s.chars()
                .all(|c| c.is_ascii_alphanumeric())
                .then(|| (text.find(&s).unwrap_or(chars[i].0), s))
        })
        .expect("the reply has three plain characters in a row");
    for stream in [false, true] {
        let mut body = base.clone();
        body["stop"] = json!([stop.clone()]);
        body["stream"] = json!(stream);
        let r = post(shared(), "/v1/completions", &body);
        let (got, reason) = if stream {
            let s = collect_stream(&r);
            (s.text, s.finish_reason.unwrap_or_default())
        } else {
            let v = r.json();
            (
                v["choices"][0]["text"].as_str().unwrap_or("").to_owned(),
                v["choices"][0]["finish_reason"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        };
        assert_eq!(got, text[..start], "stream {stream}");
        assert_eq!(reason, "stop");
    }
    // The next request on the same server is unaffected.
    assert_eq!(sha(&completion(base)), sha(&full));
}

#[test]
fn a_reply_ended_by_a_stop_string_still_reports_the_engines_usage() {
    // The first request leaves its prompt in the prompt cache; the stopped repeats must report that hit.
    let base = json!({"prompt": "A stop string and the cache: one two three four five six", "max_tokens": 24,
                      "temperature": 0, "ignore_eos": true});
    let full = completion(base.clone());
    let text = full["choices"][0]["text"].as_str().unwrap_or("").to_owned();
    let at = text
        .char_indices()
        .map(|(i, _)| i)
        .find(|&i| i >= 2 && text.is_char_boundary(i + 1) && text.find(&text[i..i + 1]) == Some(i))
        .expect("a character whose first appearance is past the start of the reply");
    let mut body = base.clone();
    body["stop"] = json!([text[at..at + 1].to_owned()]);
    let stopped = completion(body);
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    assert_eq!(stopped["choices"][0]["text"], text[..at]);
    let cached = stopped["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        cached > 0,
        "a stopped reply reports the prompt-cache hit: {}",
        stopped["usage"]
    );
    assert!(stopped["tensorfold"]["drafted"].is_u64());
}

#[test]
fn a_stop_token_id_ends_the_reply_before_that_token() {
    let base = json!({"prompt": "Hello there", "max_tokens": 16, "temperature": 0, "ignore_eos": true,
                      "return_token_ids": true});
    let full = completion(base.clone());
    let ids: Vec<u64> = full["choices"][0]["token_ids"]
        .as_array()
        .expect("token_ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let at = (1..ids.len())
        .find(|&i| !ids[..i].contains(&ids[i]))
        .expect("a token not seen before");
    let mut body = base;
    body["stop"] = json!([ids[at]]);
    let v = completion(body);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["choices"][0]["token_ids"], json!(ids[..at]));
}

#[test]
fn logprobs_come_back_for_every_token_in_both_flavours() {
    let v =
        completion(json!({"prompt": "abc", "max_tokens": 4, "logprobs": 2, "ignore_eos": true}));
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(4));
    assert_eq!(lp["token_logprobs"].as_array().map(Vec::len), Some(4));
    assert!(lp["token_logprobs"][0].as_f64().is_some_and(|x| x <= 0.0));
    let c = chat(
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "logprobs": true,
                        "top_logprobs": 3, "ignore_eos": true}),
    );
    let content = c["choices"][0]["logprobs"]["content"]
        .as_array()
        .expect("content logprobs");
    assert_eq!(content.len(), 3);
    assert_eq!(content[0]["top_logprobs"].as_array().map(Vec::len), Some(3));
    assert!(content[0]["bytes"].is_array());
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                          "required": ["city"]}}})
}

#[test]
fn offered_tools_reach_the_prompt_and_none_hides_them() {
    let msgs = json!([{"role": "user", "content": "Weather in Paris?"}]);
    let with = post(
        shared(),
        "/tokenize",
        &json!({"messages": msgs, "tools": [weather_tool()]}),
    )
    .json();
    let without = post(
        shared(),
        "/tokenize",
        &json!({"messages": msgs, "tools": [weather_tool()],
                                                      "tool_choice": "none"}),
    )
    .json();
    let count = |v: &Value| v["count"].as_u64().unwrap_or(0);
    assert!(count(&with) > count(&without) + 20);
}

#[test]
fn a_named_tool_choice_opens_the_reply_with_that_call() {
    for stream in [false, true] {
        let body = json!({"messages": [{"role": "user", "content": "Weather in Paris?"}],
                          "tools": [weather_tool()],
                          "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                          "max_tokens": 12, "temperature": 0, "stream": stream});
        let r = post(shared(), "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        if stream {
            let s = collect_stream(&r);
            let first_call = s
                .chunks
                .iter()
                .find_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0).cloned())
                .expect("a tool-call delta");
            assert_eq!(first_call["function"]["name"], "get_weather");
            assert!(first_call["id"]
                .as_str()
                .is_some_and(|id| id.starts_with("call_")));
        } else {
            // Random weights rarely finish the arguments: the call is either parsed or returned as text.
            let msg = &r.json()["choices"][0]["message"];
            let called = msg["tool_calls"][0]["function"]["name"] == "get_weather";
            let as_text = msg["content"]
                .as_str()
                .is_some_and(|c| c.contains("<function=get_weather>"));
            assert!(called || as_text, "{msg}");
        }
    }
}

#[test]
fn assistant_tool_calls_and_tool_results_render_into_the_prompt() {
    let v = chat(json!({"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}
    ], "tools": [weather_tool()], "max_tokens": 4}));
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap_or(0) > 40);
}
