//! Bad input over real HTTP: every malformed or out-of-range request gets its 4xx in OpenAI's error shape and
//! the server keeps serving; API keys, body limits, a full queue and clients that hang up mid-stream.

mod common;

use common::{get, open_stream, post, request, shared, start, start_stoppable, Setup};
use serde_json::{json, Value};
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

fn assert_error(r: &common::Resp, status: u16, param: Option<&str>) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].is_string(), "{v}");
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{v}");
    }
    v
}

fn still_serving(addr: SocketAddr) {
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "ok", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn every_bad_completion_request_gets_a_400_naming_the_parameter() {
    let addr = shared();
    let cases: Vec<(Value, &str)> = vec![
        (json!({"prompt": "x", "n": 2}), "n"),
        (json!({"prompt": "x", "max_tokens": -1}), "max_tokens"),
        (json!({"prompt": "x", "max_tokens": 0}), "max_tokens"),
        (json!({"prompt": "x", "max_tokens": "ten"}), "max_tokens"),
        (json!({"prompt": "x", "max_tokens": 1.5}), "max_tokens"),
        (json!({"prompt": "x", "max_tokens": 1e300}), "max_tokens"),
        (json!({"prompt": "x", "temperature": -1}), "temperature"),
        (json!({"prompt": "x", "temperature": "hot"}), "temperature"),
        (json!({"prompt": "x", "top_p": 2}), "top_p"),
        (json!({"prompt": "x", "top_p": 0}), "top_p"),
        (json!({"prompt": "x", "top_k": -5}), "top_k"),
        (json!({"prompt": "x", "min_p": 1.5}), "min_p"),
        (
            json!({"prompt": "x", "presence_penalty": 3}),
            "presence_penalty",
        ),
        (
            json!({"prompt": "x", "frequency_penalty": -2.5}),
            "frequency_penalty",
        ),
        (
            json!({"prompt": "x", "repetition_penalty": 0}),
            "repetition_penalty",
        ),
        (json!({"prompt": "x", "seed": "abc"}), "seed"),
        (json!({"prompt": "x", "seed": 1e30}), "seed"),
        (json!({"prompt": "x", "stream": "yes"}), "stream"),
        (
            json!({"prompt": "x", "stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (json!({"prompt": "x", "stop": 5.5}), "stop"),
        (json!({"prompt": "x", "stop": [""]}), "stop"),
        (json!({"prompt": "x", "stop": [{"a": 1}]}), "stop[0]"),
        (json!({"prompt": "x", "logprobs": 50}), "logprobs"),
        (json!({"prompt": "x", "ignore_eos": 1}), "ignore_eos"),
        (json!({"prompt": "x", "draft": "no"}), "draft"),
        (
            json!({"prompt": "x", "logit_bias": {"5": 10}}),
            "logit_bias",
        ),
        (json!({"prompt": "x", "echo": true}), "echo"),
        (
            json!({"prompt": "x", "response_format": {"type": "json_object"}}),
            "response_format",
        ),
        (json!({"prompt": [1, 99999]}), "prompt[1]"),
        (json!({"prompt": [1, -3]}), "prompt[1]"),
        (json!({"prompt": [1, "a"]}), "prompt[1]"),
        (json!({"prompt": []}), "prompt"),
        (json!({"prompt": ""}), "prompt"),
        (json!({"prompt": ["a", "b"]}), "prompt"),
        (json!({"prompt": {"text": "x"}}), "prompt"),
        (json!({"max_tokens": 3}), "prompt"),
        (json!({"prompt": "x", "model": 7}), "model"),
    ];
    for (body, param) in cases {
        let r = post(addr, "/v1/completions", &body);
        assert_error(&r, 400, Some(param));
    }
    still_serving(addr);
}

#[test]
fn every_bad_chat_request_gets_a_400_naming_the_parameter() {
    let addr = shared();
    let user = json!([{"role": "user", "content": "hi"}]);
    let tool =
        json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
    let cases: Vec<(Value, &str)> = vec![
        (json!({"messages": []}), "messages"),
        (json!({}), "messages"),
        (json!({"messages": "hi"}), "messages"),
        (json!({"messages": [{"content": "hi"}]}), "messages[0].role"),
        (
            json!({"messages": [{"role": "wizard", "content": "hi"}]}),
            "messages[0].role",
        ),
        (
            json!({"messages": [{"role": "user"}]}),
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            "messages[0].content[0].type",
        ),
        (json!({"messages": [5]}), "messages[0]"),
        (
            json!({"messages": [{"role": "assistant", "content": "only me"}]}),
            "messages",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"},
                             {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}]}]}),
            "messages[1].tool_calls[0].function.arguments",
        ),
        (json!({"messages": user, "n": 3}), "n"),
        (
            json!({"messages": user, "max_completion_tokens": -4}),
            "max_completion_tokens",
        ),
        (json!({"messages": user, "top_logprobs": 5}), "top_logprobs"),
        (
            json!({"messages": user, "logprobs": true, "top_logprobs": 99}),
            "top_logprobs",
        ),
        (json!({"messages": user, "tools": "f"}), "tools"),
        (
            json!({"messages": user, "tools": [{"type": "retrieval"}]}),
            "tools[0].type",
        ),
        (
            json!({"messages": user, "tools": [{"type": "function", "function": {"name": ""}}]}),
            "tools[0].function.name",
        ),
        (
            json!({"messages": user, "tool_choice": "required"}),
            "tool_choice",
        ),
        (
            json!({"messages": user, "tools": [tool], "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (
            json!({"messages": user, "tools": [tool], "tool_choice": {"type": "function", "function": {"name": "g"}}}),
            "tool_choice",
        ),
        (
            json!({"messages": user, "chat_template_kwargs": {"enable_thinking": "yes"}}),
            "chat_template_kwargs.enable_thinking",
        ),
        (
            json!({"messages": user, "chat_template_kwargs": []}),
            "chat_template_kwargs",
        ),
    ];
    for (body, param) in cases {
        let r = post(addr, "/v1/chat/completions", &body);
        assert_error(&r, 400, Some(param));
    }
    still_serving(addr);
}

#[test]
fn malformed_bodies_get_400_and_unknown_paths_404() {
    let addr = shared();
    for body in [
        &b"{not json"[..],
        b"",
        b"[1,2,3]",
        b"\"just a string\"",
        b"{\"prompt\": \"\xff\xfe\"}",
        b"\xc3\x28\xa0\xa1",
    ] {
        for path in [
            "/v1/completions",
            "/v1/chat/completions",
            "/tokenize",
            "/detokenize",
        ] {
            let r = request(addr, "POST", path, &[], body);
            assert_error(&r, 400, None);
        }
    }
    let huge = b"{\"prompt\": \"x\", \"max_tokens\": 99999999999999999999999999}";
    assert_error(
        &request(addr, "POST", "/v1/completions", &[], huge),
        400,
        Some("max_tokens"),
    );
    assert_error(&get(addr, "/v1/nothing"), 404, None);
    assert_error(&get(addr, "/v1/completions"), 405, None);
    assert_error(
        &post(addr, "/detokenize", &json!({"tokens": [1, 100000]})),
        400,
        Some("tokens[1]"),
    );
    // Unknown top-level fields are ignored, as vLLM does.
    still_serving(addr);
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 1, "frobnicate": true}),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_prompt_beyond_the_context_gets_context_length_exceeded() {
    let addr = shared();
    let ids: Vec<u32> = (0..4000).map(|i| i % 400).collect();
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": ids, "max_tokens": 200}),
    );
    let v = assert_error(&r, 400, Some("prompt"));
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let long: Vec<u32> = (0..4096).map(|i| i % 400).collect();
    let r = post(addr, "/v1/completions", &json!({"prompt": long}));
    assert_eq!(
        assert_error(&r, 400, Some("prompt"))["error"]["code"],
        "context_length_exceeded"
    );
    let text = "word ".repeat(5000);
    let r = post(
        addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": text}]}),
    );
    assert_eq!(
        assert_error(&r, 400, Some("messages"))["error"]["code"],
        "context_length_exceeded"
    );
    still_serving(addr);
}

#[test]
fn api_keys_are_required_except_on_health() {
    let addr = start(Setup {
        api_keys: vec!["sekrit".into(), "other".into()],
        ..Setup::default()
    });
    let body = json!({"prompt": "x", "max_tokens": 1}).to_string();
    let send = |headers: &[(&str, &str)]| {
        request(addr, "POST", "/v1/completions", headers, body.as_bytes())
    };
    assert_error(&send(&[]), 401, None);
    assert_error(&send(&[("Authorization", "Bearer wrong")]), 401, None);
    assert_error(&send(&[("x-api-key", "sekri")]), 401, None);
    assert_error(&request(addr, "GET", "/v1/models", &[], b""), 401, None);
    assert_eq!(send(&[("Authorization", "Bearer sekrit")]).status, 200);
    assert_eq!(send(&[("authorization", "bearer other")]).status, 200);
    assert_eq!(send(&[("x-api-key", "sekrit")]).status, 200);
    assert_eq!(get(addr, "/health").status, 200);
}

#[test]
fn an_oversized_body_gets_413_and_the_server_keeps_serving() {
    let addr = start(Setup {
        max_body_bytes: 1 << 16,
        ..Setup::default()
    });
    let big = json!({"prompt": "a".repeat(100_000)});
    let r = post(addr, "/v1/completions", &big);
    assert_error(&r, 413, None);
    still_serving(addr);
}

#[test]
fn a_client_that_hangs_up_mid_stream_frees_its_slot_and_a_full_queue_gets_429() {
    let addr = start(Setup {
        parallel: 1,
        queue: 1,
        context: 1 << 16,
        ..Setup::default()
    });
    let long = json!({"prompt": "go", "max_tokens": 60000, "ignore_eos": true, "stream": true, "draft": false});
    let running = |addr| {
        get(addr, "/health").json()["requests_running"]
            .as_u64()
            .unwrap_or(99)
    };
    // One stream runs, one waits; a third request is refused with Retry-After.
    let first = open_stream(addr, "/v1/completions", &long, 3);
    let queued = std::thread::spawn(move || open_stream(addr, "/v1/completions", &long, 1));
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(addr, "/health").json()["queue_depth"] != 1 {
        assert!(Instant::now() < deadline, "the second request never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 2}),
    );
    assert_error(&r, 429, None);
    assert!(r.header("retry-after").is_some());
    // Hanging up the running stream lets the queued one in; hanging that up frees the engine.
    drop(first);
    let second = queued.join().expect("queued client");
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(30);
    while running(addr) != 0 {
        assert!(
            Instant::now() < deadline,
            "the engine kept a cancelled stream"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    still_serving(addr);
    let metrics = get(addr, "/metrics").text();
    assert!(
        metrics.contains("tensorfold_request_success_total{finished_reason=\"cancelled\"} 2"),
        "{metrics}"
    );
}

#[test]
fn graceful_shutdown_finishes_the_stream_in_flight_then_stops_listening() {
    let (addr, stop, join) = start_stoppable(Setup {
        context: 1 << 14,
        ..Setup::default()
    });
    let body = json!({"prompt": "go", "max_tokens": 2000, "ignore_eos": true, "stream": true});
    let mut s = open_stream(addr, "/v1/completions", &body, 2);
    stop.send(()).expect("server still running");
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .expect("the stream runs to its end");
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("\"finish_reason\":\"length\""), "{rest}");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    join.join()
        .expect("server thread ends after the engine shut down");
    assert!(TcpStream::connect(addr).is_err());
}
