//! Property tests of request parsing: random JSON (near-valid requests, wrong types, huge numbers) and random bytes
//! (invalid UTF-8 included), straight into the parsers and through HTTP — never a panic, never a 5xx.

mod common;

use common::{fixture_dir, request, start, Setup};
use proptest::prelude::*;
use serde_json::{json, Map, Number, Value};
use std::net::SocketAddr;
use std::sync::OnceLock;
use tensorfold_core::chat::ChatTemplate;
use tensorfold_core::tokenizer::TextTokenizer;
use tensorfold_server::chat_request::parse_chat;
use tensorfold_server::prompt::build_chat_prompt;
use tensorfold_server::request::{parse_completion, Limits};

const FIELDS: &[&str] = &[
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "n",
    "stream",
    "stream_options",
    "include_usage",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "chat_template_kwargs",
    "enable_thinking",
    "draft",
    "ignore_eos",
    "role",
    "content",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "type",
    "parameters",
    "properties",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "response_format",
    "logit_bias",
    "echo",
    "suffix",
    "best_of",
    "return_token_ids",
    "text",
    "tool_call_id",
    "reasoning_content",
    "model",
];

const LIMITS: Limits = Limits {
    vocab: 512,
    max_tokens: 4,
};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..600).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        Just(json!(1e308)),
        Just(json!(-0.0)),
        Just(json!(0.5)),
        "\\PC{0,12}".prop_map(Value::from),
        prop::sample::select(vec![
            "user",
            "assistant",
            "system",
            "developer",
            "tool",
            "function",
            "none",
            "auto",
            "required",
            "text",
            "</think>",
            "<tool_call>"
        ])
        .prop_map(Value::from),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(FIELDS).prop_map(str::to_owned),
        1 => "[a-z_]{1,8}",
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A valid base request with random known fields laid over it.
fn near_valid(chat: bool) -> impl Strategy<Value = Value> {
    let overlay = prop::collection::btree_map(
        prop::sample::select(FIELDS).prop_map(str::to_owned),
        value(),
        0..4,
    );
    let message = prop::collection::btree_map(
        prop::sample::select(FIELDS).prop_map(str::to_owned),
        value(),
        0..3,
    );
    (overlay, message).prop_map(move |(over, msg)| {
        let mut base = if chat {
            let mut m = json!({"role": "user", "content": "hi"});
            for (k, v) in msg {
                m[k] = v;
            }
            json!({"messages": [m], "max_tokens": 2})
        } else {
            json!({"prompt": "hi", "max_tokens": 2})
        };
        for (k, v) in over {
            base[k] = v;
        }
        base
    })
}

fn assets() -> &'static (TextTokenizer, ChatTemplate) {
    static ASSETS: OnceLock<(TextTokenizer, ChatTemplate)> = OnceLock::new();
    ASSETS.get_or_init(|| {
        let dir = fixture_dir();
        let tok = TextTokenizer::from_dir(&dir)
            .ok()
            .flatten()
            .expect("fixture tokenizer");
        let tpl = ChatTemplate::from_dir(&dir)
            .ok()
            .flatten()
            .expect("fixture template");
        (tok, tpl)
    })
}

/// Parses `body` as both endpoints would; errors must be client errors.
fn parse_everything(body: &[u8]) {
    if let Err(e) = parse_completion(body, &LIMITS) {
        assert!(e.status.is_client_error(), "{e}");
    }
    match parse_chat(body, &LIMITS) {
        Err(e) => assert!(e.status.is_client_error(), "{e}"),
        Ok(req) => {
            let (tok, tpl) = assets();
            if let Err(e) = build_chat_prompt(&req, tok, tpl) {
                assert!(e.status.is_client_error(), "{e}");
            }
        }
    }
}

fn fuzz_server() -> SocketAddr {
    static ADDR: OnceLock<SocketAddr> = OnceLock::new();
    *ADDR.get_or_init(|| {
        start(Setup {
            max_tokens: Some(4),
            ..Setup::default()
        })
    })
}

fn post_raw(path: &str, body: &[u8]) -> u16 {
    request(fuzz_server(), "POST", path, &[], body).status
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_json_never_panics_the_parsers(v in value()) {
        parse_everything(v.to_string().as_bytes());
    }

    #[test]
    fn near_valid_requests_never_panic_the_parsers(v in near_valid(true), w in near_valid(false)) {
        parse_everything(v.to_string().as_bytes());
        parse_everything(w.to_string().as_bytes());
    }

    #[test]
    fn random_bytes_never_panic_the_parsers(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        parse_everything(&bytes);
        let mut framed = b"{\"prompt\": \"".to_vec();
        framed.extend_from_slice(&bytes);
        framed.extend_from_slice(b"\"}");
        parse_everything(&framed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn near_valid_requests_over_http_never_get_a_5xx(v in near_valid(true), w in near_valid(false)) {
        let chat = post_raw("/v1/chat/completions", v.to_string().as_bytes());
        prop_assert!(chat < 500, "chat {} -> {}", v, chat);
        let comp = post_raw("/v1/completions", w.to_string().as_bytes());
        prop_assert!(comp < 500, "completion {} -> {}", w, comp);
    }

    #[test]
    fn random_bytes_over_http_get_a_4xx(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        for path in ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"] {
            let status = post_raw(path, &bytes);
            prop_assert!((400..500).contains(&status), "{} -> {}", path, status);
        }
    }
}

#[test]
fn the_fuzzed_server_still_answers_afterwards() {
    let r = request(
        fuzz_server(),
        "POST",
        "/v1/completions",
        &[],
        br#"{"prompt": "ok"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
}
