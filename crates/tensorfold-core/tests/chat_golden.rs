//! The Qwen3.5 chat template renders byte for byte as transformers (jinja2) renders it, filters included.

use std::path::PathBuf;

use serde_json::{json, Map, Value};
use tensorfold_core::chat::{ChatRenderRequest, ChatTemplate};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tokenizer")
}

fn fixture_template() -> ChatTemplate {
    ChatTemplate::from_dir(&fixture_dir())
        .expect("template loads")
        .expect("fixture has a template")
}

fn read_goldens(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(fixture_dir().join(name)).expect("golden file");
    serde_json::from_str(&text).expect("golden JSON")
}

fn request(messages: Value) -> ChatRenderRequest {
    ChatRenderRequest {
        messages,
        add_generation_prompt: true,
        ..Default::default()
    }
}

#[test]
fn every_golden_render_is_reproduced_byte_for_byte() {
    let template = fixture_template();
    let goldens = read_goldens("golden_renders.json");
    assert!(goldens.len() >= 6);
    for (i, golden) in goldens.iter().enumerate() {
        let req = ChatRenderRequest {
            messages: golden["messages"].clone(),
            tools: Some(golden["tools"].clone()).filter(|t| !t.is_null()),
            add_generation_prompt: golden["add_generation_prompt"].as_bool().expect("bool"),
            enable_thinking: golden["enable_thinking"].as_bool(),
            extra: Map::new(),
        };
        let got = template.render(&req).expect("render");
        assert_eq!(got, golden["text"].as_str().expect("text"), "golden #{i}");
    }
}

#[test]
fn every_golden_filter_render_matches_jinja2() {
    let goldens = read_goldens("golden_filters.json");
    for golden in goldens {
        let source = golden["template"].as_str().expect("template");
        let template = ChatTemplate::new(source, vec![]).expect("compiles");
        let req = ChatRenderRequest {
            messages: json!([]),
            extra: golden["context"].as_object().expect("context").clone(),
            ..Default::default()
        };
        let got = template.render(&req).expect("render");
        assert_eq!(got, golden["text"].as_str().expect("text"), "{source}");
    }
}

#[test]
fn string_tool_call_arguments_render_like_the_parsed_object() {
    let template = fixture_template();
    let call = |arguments: Value| {
        json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": arguments}}
            ]},
            {"role": "tool", "content": "done"}
        ])
    };
    let as_object = template
        .render(&request(call(json!({"x": 1, "y": [true]}))))
        .expect("render");
    let as_string = template
        .render(&request(call(json!("{\"x\": 1, \"y\": [true]}"))))
        .expect("render");
    assert_eq!(as_object, as_string);
    assert!(
        as_object.contains("<parameter=y>\n[true]\n</parameter>"),
        "{as_object}"
    );
}

#[test]
fn chat_template_kwargs_reach_the_template() {
    let template = fixture_template();
    let messages = json!([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]}]);
    let mut req = request(messages);
    req.extra.insert("add_vision_id".into(), json!(true));
    req.extra.insert("enable_thinking".into(), json!(false));
    let text = template.render(&req).expect("render");
    assert!(
        text.starts_with("<|im_start|>user\nPicture 1: <|vision_start|>"),
        "{text}"
    );
    assert!(text.ends_with("<think>\n\n</think>\n\n"), "{text}");
    // The explicit field wins over the same key in the kwargs.
    req.enable_thinking = Some(true);
    assert!(template
        .render(&req)
        .expect("render")
        .ends_with("assistant\n<think>\n"));
}

#[test]
fn special_token_variables_come_from_tokenizer_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = json!({
        "bos_token": {"content": "<s>", "special": true},
        "eos_token": "<|im_end|>",
        "chat_template": "{{ bos_token }}|{{ eos_token }}|{{ pad_token }}|{{ messages | length }}"
    });
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).expect("write");
    let template = ChatTemplate::from_dir(dir.path())
        .expect("loads")
        .expect("some");
    let text = template
        .render(&request(json!([{"role": "user", "content": "x"}])))
        .expect("render");
    assert_eq!(text, "<s>|<|im_end|>||1");
}

#[test]
fn strftime_now_renders_a_date() {
    let template = ChatTemplate::new("{{ strftime_now('%Y-%m-%d') }}", vec![]).expect("compiles");
    let text = template.render(&request(json!([]))).expect("render");
    assert_eq!(text.len(), 10, "{text}");
    assert_eq!(text.matches('-').count(), 2, "{text}");
}

#[test]
fn floats_print_as_python_repr() {
    let template =
        ChatTemplate::new("{% for f in xs %}{{ f }} {% endfor %}", vec![]).expect("compiles");
    let xs = json!([
        0.5,
        1.0,
        -2.0,
        1e-5,
        0.0001,
        1e16,
        1.5e16,
        123456789012345.6,
        0.30000000000000004,
        -0.0,
        2.5e-300,
        7
    ]);
    let mut req = request(json!([]));
    req.extra.insert("xs".into(), xs);
    let want = "0.5 1.0 -2.0 1e-05 0.0001 1e+16 1.5e+16 123456789012345.6 0.30000000000000004 -0.0 2.5e-300 7 ";
    assert_eq!(template.render(&req).expect("render"), want);
}
