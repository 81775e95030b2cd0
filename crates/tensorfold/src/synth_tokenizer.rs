//! The tokenizer `tensorfold synth` writes beside a random checkpoint: one word per id of the padded vocabulary
//! (id 17 is "w17"; ids decode space-separated) and Qwen3.5's ChatML markers at their real ids, plus the built-in
//! model's chat template. Its text means nothing: it lets a synthetic checkpoint be served like a real one
//! (streamed text, chat requests, stop at `<|im_end|>`), so the server can be timed at real shapes.

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};
use std::path::Path;

/// Qwen3.5's ChatML markers at their ids (config.json's eos ids, 248044 and 248046, point at two of them).
const SPECIALS: [(u32, &str); 3] = [
    (248_044, "<|endoftext|>"),
    (248_045, "<|im_start|>"),
    (248_046, "<|im_end|>"),
];

/// The Qwen3.5 chat template the built-in model ships (ChatML, tools, thinking).
const CHAT_TEMPLATE: &str =
    include_str!("../../../models/tensorfold-coder-tiny/chat_template.jinja");

/// Writes tokenizer.json, tokenizer_config.json and chat_template.jinja for a vocabulary of `vocab` ids into `dir`.
pub fn write(dir: &Path, vocab: usize) -> Result<()> {
    // The markers are in the word vocabulary too: the library gives an added token the id its content has there,
    // and ids past the vocabulary to the rest (so the JSON's "id" alone would not keep 248046).
    let word = |id: u32| match SPECIALS.iter().find(|s| s.0 == id) {
        Some(&(_, content)) => content.to_string(),
        None => format!("w{id}"),
    };
    let words: Map<String, Value> = (0..vocab as u32).map(|id| (word(id), json!(id))).collect();
    let marker = |content: &str| {
        json!({"content": content, "single_word": false, "lstrip": false, "rstrip": false,
               "normalized": false, "special": true})
    };
    let added: Vec<Value> = SPECIALS
        .iter()
        .map(|&(id, content)| {
            let mut m = marker(content);
            m["id"] = json!(id);
            m
        })
        .collect();
    // No decoder: the tokenizers library then joins a reply's tokens with spaces, so every id adds text.
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null,
        "decoder": null, "model": {"type": "WordLevel", "vocab": words, "unk_token": "w0"},
    });
    let decoder: Map<String, Value> = SPECIALS
        .iter()
        .map(|&(id, content)| (id.to_string(), marker(content)))
        .collect();
    let config = json!({
        "add_bos_token": false, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "added_tokens_decoder": decoder,
    });
    let put = |name: &str, bytes: &[u8]| {
        std::fs::write(dir.join(name), bytes).with_context(|| format!("writing {name}"))
    };
    put("tokenizer.json", &serde_json::to_vec(&tokenizer)?)?;
    put(
        "tokenizer_config.json",
        serde_json::to_string_pretty(&config)?.as_bytes(),
    )?;
    put("chat_template.jinja", CHAT_TEMPLATE.as_bytes())
}

#[cfg(test)]
mod tests {
    use tensorfold_core::chat::ChatTemplate;
    use tensorfold_core::tokenizer::TextTokenizer;

    #[test]
    fn a_synthetic_checkpoints_tokenizer_decodes_every_id_and_stops_at_im_end() {
        let dir = tempfile::tempdir().expect("temp dir");
        super::write(dir.path(), 248_320).expect("written");
        let tok = TextTokenizer::from_dir(dir.path())
            .expect("loads")
            .expect("present");
        assert_eq!(tok.vocab_size(), 248_320);
        assert_eq!(
            tok.decode(&[5, 248_319, 17], false).unwrap(),
            "w5 w248319 w17"
        );
        assert_eq!(tok.encode("w5 w17").unwrap(), vec![5, 17]);
        assert_eq!(tok.token_id("<|im_end|>"), Some(248_046));
        assert_eq!(tok.token_id("<|im_start|>"), Some(248_045));
        assert_eq!(tok.stop_ids(), vec![248_046, 248_044]);
        assert!(ChatTemplate::from_dir(dir.path()).expect("reads").is_some());
    }
}
