//! Where a chat template is found, and how every failure turns into a clear error rather than a panic.

use std::path::{Path, PathBuf};

use serde_json::json;
use tensorfold_core::chat::{ChatRenderRequest, ChatTemplate};
use tensorfold_core::CoreError;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tokenizer")
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("write");
}

fn user_turn() -> ChatRenderRequest {
    ChatRenderRequest {
        messages: json!([{"role": "user", "content": "hi"}]),
        ..Default::default()
    }
}

#[test]
fn a_directory_without_any_template_gives_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(ChatTemplate::from_dir(dir.path())
        .expect("no error")
        .is_none());
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"eos_token": "<|im_end|>"}"#,
    );
    assert!(ChatTemplate::from_dir(dir.path())
        .expect("no error")
        .is_none());
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"chat_template": null}"#,
    );
    assert!(ChatTemplate::from_dir(dir.path())
        .expect("no error")
        .is_none());
}

#[test]
fn chat_template_jinja_wins_over_the_config_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"chat_template": "from config"}"#,
    );
    write(dir.path(), "chat_template.jinja", "from file");
    let template = ChatTemplate::from_dir(dir.path())
        .expect("loads")
        .expect("some");
    assert_eq!(template.render(&user_turn()).expect("render"), "from file");
    assert_eq!(template.source(), "from file");
}

#[test]
fn the_list_form_of_chat_template_picks_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = json!({"chat_template": [
        {"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "plain {{ messages[0].content }}"}
    ]});
    write(dir.path(), "tokenizer_config.json", &config.to_string());
    let template = ChatTemplate::from_dir(dir.path())
        .expect("loads")
        .expect("some");
    assert_eq!(template.render(&user_turn()).expect("render"), "plain hi");
}

#[test]
fn a_list_without_default_is_a_config_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = json!({"chat_template": [{"name": "tool_use", "template": "tools"}]});
    write(dir.path(), "tokenizer_config.json", &config.to_string());
    let err = ChatTemplate::from_dir(dir.path()).expect_err("no default");
    assert!(matches!(err, CoreError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("default"), "{err}");
}

#[test]
fn raise_exception_becomes_a_template_error_with_its_message() {
    let source = "{% if messages | length == 0 %}{{ raise_exception('Need at least one message!') }}{% endif %}";
    let template = ChatTemplate::new(source, vec![]).expect("compiles");
    let req = ChatRenderRequest {
        messages: json!([]),
        ..Default::default()
    };
    let err = template.render(&req).expect_err("raises");
    assert!(matches!(err, CoreError::Template(_)), "{err:?}");
    assert!(
        err.to_string().contains("Need at least one message!"),
        "{err}"
    );
}

#[test]
fn the_qwen_template_rejects_bad_conversations_with_its_own_messages() {
    let template = ChatTemplate::from_dir(&fixture_dir())
        .expect("loads")
        .expect("some");
    let cases = [
        (json!([]), "No messages provided."),
        (
            json!([{"role": "assistant", "content": "hi"}]),
            "No user query found in messages.",
        ),
        (
            json!([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]),
            "System message must be at the beginning.",
        ),
        (
            json!([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]),
            "Unexpected message role.",
        ),
        (
            json!([{"role": "user", "content": 42}]),
            "Unexpected content type.",
        ),
    ];
    for (messages, want) in cases {
        let req = ChatRenderRequest {
            messages,
            ..Default::default()
        };
        let err = template.render(&req).expect_err(want);
        assert!(err.to_string().contains(want), "{err}");
    }
}

#[test]
fn a_template_syntax_error_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "chat_template.jinja",
        "{% for m in messages %}{{ m.content }}",
    );
    let err = ChatTemplate::from_dir(dir.path()).expect_err("unclosed for");
    assert!(matches!(err, CoreError::Template(_)), "{err:?}");
    assert!(err.to_string().contains("chat_template.jinja"), "{err}");
}

#[test]
fn messages_that_are_not_an_array_are_rejected() {
    let template = ChatTemplate::new("{{ messages }}", vec![]).expect("compiles");
    let req = ChatRenderRequest {
        messages: json!({"role": "user"}),
        ..Default::default()
    };
    assert!(matches!(template.render(&req), Err(CoreError::Template(_))));
}

#[test]
fn runtime_errors_in_a_template_are_errors_not_panics() {
    let template =
        ChatTemplate::new("{{ messages[0].content.nope() }}{{ 1 / 0 }}", vec![]).expect("compiles");
    assert!(matches!(
        template.render(&user_turn()),
        Err(CoreError::Template(_))
    ));
    let template =
        ChatTemplate::new("{{ messages | tojson(indent=[1]) }}", vec![]).expect("compiles");
    assert!(matches!(
        template.render(&user_turn()),
        Err(CoreError::Template(_))
    ));
    let template =
        ChatTemplate::new("{{ messages | tojson(colour=1) }}", vec![]).expect("compiles");
    assert!(matches!(
        template.render(&user_turn()),
        Err(CoreError::Template(_))
    ));
}

#[test]
fn a_malformed_tokenizer_config_is_a_json_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "tokenizer_config.json", "{\"chat_template\": ");
    let err = ChatTemplate::from_dir(dir.path()).expect_err("malformed");
    assert!(matches!(err, CoreError::Json { .. }), "{err:?}");
}
