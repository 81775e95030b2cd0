//! The fixture tokenizer loads, encodes exactly like python `tokenizers`, and reports bad files clearly.

use std::path::PathBuf;

use tensorfold_core::tokenizer::TextTokenizer;
use tensorfold_core::CoreError;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tokenizer")
}

fn fixture() -> TextTokenizer {
    TextTokenizer::from_dir(&fixture_dir())
        .expect("fixture loads")
        .expect("fixture has a tokenizer.json")
}

const ADDED: [&str; 12] = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
];

#[test]
fn added_tokens_follow_the_bpe_vocab_in_order() {
    let tok = fixture();
    assert_eq!(tok.vocab_size(), 500);
    for (i, name) in ADDED.iter().enumerate() {
        assert_eq!(tok.token_id(name), Some(488 + i as u32), "{name}");
        assert_eq!(tok.id_to_token(488 + i as u32).as_deref(), Some(*name));
    }
    assert_eq!(tok.token_id("<|not_a_token|>"), None);
}

#[test]
fn stop_ids_are_im_end_then_endoftext() {
    let tok = fixture();
    assert_eq!(tok.eos_token(), Some("<|im_end|>"));
    assert_eq!(tok.stop_ids(), vec![490, 488]);
}

#[test]
fn encodings_equal_the_python_tokenizers_goldens() {
    let tok = fixture();
    let path = fixture_dir().join("golden_encodings.json");
    let text = std::fs::read_to_string(path).expect("golden_encodings.json");
    let goldens: Vec<serde_json::Value> = serde_json::from_str(&text).expect("valid JSON");
    assert!(goldens.len() >= 5);
    for golden in goldens {
        let input = golden["text"].as_str().expect("text");
        let want: Vec<u32> = serde_json::from_value(golden["ids"].clone()).expect("ids");
        assert_eq!(tok.encode(input).expect("encode"), want, "{input:?}");
        let skipped = golden["decoded_skip_special"].as_str().expect("decoded");
        assert_eq!(tok.decode(&want, true).expect("decode"), skipped);
    }
}

#[test]
fn special_tokens_in_text_match_whole_and_no_bos_is_added() {
    let tok = fixture();
    let ids = tok
        .encode("<|im_start|>user\nhi<|im_end|>")
        .expect("encode");
    assert_eq!(ids.first(), Some(&489));
    assert_eq!(ids.last(), Some(&490));
    assert_eq!(ids.iter().filter(|&&id| id >= 488).count(), 2);
    assert_eq!(tok.encode("").expect("encode"), Vec::<u32>::new());
}

#[test]
fn digits_are_split_one_per_token() {
    let tok = fixture();
    let ids = tok.encode("2024").expect("encode");
    assert_eq!(ids, vec![50, 48, 50, 52]);
}

#[test]
fn skip_special_drops_chatml_markers_but_keeps_think_and_tool_markup() {
    let tok = fixture();
    let text = "<|im_start|>assistant\n<think>\nhm\n</think>\n\n<tool_call>x</tool_call><|im_end|><|endoftext|>";
    let ids = tok.encode(text).expect("encode");
    assert_eq!(tok.decode(&ids, false).expect("decode"), text);
    assert_eq!(
        tok.decode(&ids, true).expect("decode"),
        "assistant\n<think>\nhm\n</think>\n\n<tool_call>x</tool_call>"
    );
}

#[test]
fn text_round_trips_through_encode_and_decode() {
    let tok = fixture();
    for text in [
        "plain words",
        "unicode: café 你好 😀",
        "tabs\tand\r\nnewlines\n\n",
        "  lead",
    ] {
        let ids = tok.encode(text).expect("encode");
        assert_eq!(tok.decode(&ids, false).expect("decode"), text);
    }
}

#[test]
fn decoding_an_unknown_id_is_an_error_naming_it() {
    let tok = fixture();
    let err = tok
        .decode(&[72, 500], false)
        .expect_err("id 500 is out of range");
    assert!(matches!(err, CoreError::Tokenizer(_)));
    assert!(err.to_string().contains("500"), "{err}");
}

#[test]
fn a_directory_without_tokenizer_json_gives_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(TextTokenizer::from_dir(dir.path())
        .expect("no error")
        .is_none());
}

#[test]
fn malformed_tokenizer_json_is_a_json_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": ").expect("write");
    let err = TextTokenizer::from_dir(dir.path()).expect_err("malformed");
    assert!(matches!(err, CoreError::Json { .. }), "{err:?}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

#[test]
fn well_formed_json_that_is_not_a_tokenizer_is_a_config_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": 3}").expect("write");
    let err = TextTokenizer::from_dir(dir.path()).expect_err("not a tokenizer");
    assert!(matches!(err, CoreError::Config { .. }), "{err:?}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

#[test]
fn malformed_tokenizer_config_is_reported_not_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = fixture_dir().join("tokenizer.json");
    std::fs::copy(src, dir.path().join("tokenizer.json")).expect("copy");
    std::fs::write(dir.path().join("tokenizer_config.json"), "[1,").expect("write");
    let err = TextTokenizer::from_dir(dir.path()).expect_err("bad config");
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
}

#[test]
fn without_tokenizer_config_the_chatml_stops_still_apply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = fixture_dir().join("tokenizer.json");
    std::fs::copy(src, dir.path().join("tokenizer.json")).expect("copy");
    let tok = TextTokenizer::from_dir(dir.path())
        .expect("loads")
        .expect("some");
    assert_eq!(tok.eos_token(), None);
    assert_eq!(tok.stop_ids(), vec![490, 488]);
}
