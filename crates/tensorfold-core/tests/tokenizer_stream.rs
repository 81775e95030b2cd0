//! Streaming detokenisation emits only whole characters and adds up to exactly `decode` of all ids.

use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use tensorfold_core::tokenizer::{StreamDecoder, TextTokenizer};

fn fixture() -> &'static TextTokenizer {
    static TOK: OnceLock<TextTokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/tokenizer");
        TextTokenizer::from_dir(&dir)
            .expect("fixture loads")
            .expect("fixture has a tokenizer.json")
    })
}

/// Streams `ids` and returns each step's output plus the final flush.
fn stream(tok: &TextTokenizer, ids: &[u32], skip_special: bool) -> (Vec<Option<String>>, String) {
    let mut decoder = StreamDecoder::new(tok, skip_special);
    let steps = ids
        .iter()
        .map(|&id| decoder.step(id).expect("step"))
        .collect();
    (steps, decoder.finish().expect("finish"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn streamed_pieces_concatenate_to_the_full_decode(
        ids in proptest::collection::vec(0u32..500, 0..48),
        skip_special in any::<bool>(),
    ) {
        let tok = fixture();
        let (steps, rest) = stream(tok, &ids, skip_special);
        let streamed: String = steps.into_iter().flatten().collect::<String>() + &rest;
        prop_assert_eq!(streamed, tok.decode(&ids, skip_special).expect("decode"));
    }

    #[test]
    fn streaming_valid_text_never_emits_a_replacement_character(
        text in "[a-z 0-9é你好😀\n<>|_]{0,40}",
    ) {
        let tok = fixture();
        let ids = tok.encode(&text).expect("encode");
        let (steps, rest) = stream(tok, &ids, false);
        for piece in steps.iter().flatten() {
            prop_assert!(!piece.contains('\u{FFFD}'), "{:?}", piece);
        }
        prop_assert_eq!(rest, "");
        prop_assert_eq!(steps.into_iter().flatten().collect::<String>(), text);
    }
}

#[test]
fn a_character_split_across_byte_tokens_is_held_until_complete() {
    let tok = fixture();
    // "😀" is four byte tokens in the fixture vocabulary (F0 9F 98 80 in GPT-2 byte order ids).
    let ids = tok.encode("a😀b").expect("encode");
    let (steps, rest) = stream(tok, &ids, false);
    let pieces: Vec<String> = steps.iter().flatten().cloned().collect();
    assert_eq!(pieces.concat(), "a😀b");
    assert!(pieces.iter().any(|p| p.contains('😀')));
    assert!(steps.iter().filter(|s| s.is_none()).count() >= 1);
    assert_eq!(rest, "");
}

#[test]
fn finish_flushes_a_dangling_partial_character_as_decode_would() {
    let tok = fixture();
    let mut decoder = StreamDecoder::new(tok, false);
    assert_eq!(decoder.step(72).expect("step").as_deref(), Some("H"));
    // 0xE4 opens a three-byte character that never completes.
    assert_eq!(decoder.step(228).expect("step"), None);
    assert_eq!(decoder.finish().expect("finish"), "\u{FFFD}");
    assert_eq!(tok.decode(&[72, 228], false).expect("decode"), "H\u{FFFD}");
    // After finish the decoder starts over.
    assert_eq!(decoder.step(105).expect("step").as_deref(), Some("i"));
}

#[test]
fn skipped_special_tokens_emit_nothing() {
    let tok = fixture();
    let mut decoder = StreamDecoder::new(tok, true);
    assert_eq!(decoder.step(490).expect("step"), None);
    assert_eq!(decoder.step(72).expect("step").as_deref(), Some("H"));
    assert_eq!(decoder.finish().expect("finish"), "");
}

#[test]
fn an_unknown_id_is_an_error_and_leaves_the_stream_usable() {
    let tok = fixture();
    let mut decoder = StreamDecoder::new(tok, false);
    assert!(decoder.step(9999).is_err());
    assert_eq!(decoder.step(72).expect("step").as_deref(), Some("H"));
}

#[test]
fn the_decoder_is_owned_and_can_move_to_another_thread() {
    let tok = fixture().clone();
    let ids = tok.encode("moved across threads").expect("encode");
    let mut decoder = StreamDecoder::new(&tok, false);
    drop(tok);
    let out = std::thread::spawn(move || {
        let mut out = String::new();
        for id in ids {
            out.extend(decoder.step(id).expect("step"));
        }
        out + &decoder.finish().expect("finish")
    })
    .join()
    .expect("thread");
    assert_eq!(out, "moved across threads");
}
