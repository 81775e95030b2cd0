//! Text ⇄ token ids from a checkpoint's `tokenizer.json` (+ `tokenizer_config.json`): specials match as whole
//! tokens, no BOS is added, and streaming detokenisation never splits a UTF-8 character.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{CoreError, Result};

/// ChatML stop markers: generation ends at either, whatever the config's eos says.
const STOP_TOKENS: [&str; 2] = ["<|im_end|>", "<|endoftext|>"];
const REPLACEMENT: char = '\u{FFFD}';

/// A loaded tokenizer; cheap to clone and shareable across threads.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    eos_token: Option<String>,
    vocab_size: usize,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("eos_token", &self.eos_token)
            .finish()
    }
}

impl TextTokenizer {
    /// Loads `dir/tokenizer.json` (and `dir/tokenizer_config.json` when present).
    /// `Ok(None)` when the directory has no tokenizer.json: such a checkpoint runs from token ids.
    pub fn from_dir(dir: &Path) -> Result<Option<TextTokenizer>> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Ok(None);
        }
        let bytes = std::fs::read(&path).map_err(|e| CoreError::io(&path, e))?;
        // Parse once as plain JSON first so a syntax error and a wrong structure read differently.
        serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).map_err(|e| CoreError::Json {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| CoreError::config(&path, format!("not a usable tokenizer: {e}")))?;
        let config = read_tokenizer_config(dir)?;
        let eos_token = config
            .as_ref()
            .and_then(|c| c.get("eos_token"))
            .and_then(special_token_text);
        let max_added = inner
            .get_added_tokens_decoder()
            .keys()
            .map(|&id| id as usize + 1)
            .max();
        let vocab_size = inner.get_vocab_size(true).max(max_added.unwrap_or(0));
        Ok(Some(TextTokenizer {
            inner: Arc::new(inner),
            eos_token,
            vocab_size,
        }))
    }

    /// Token ids of `text`; special and added tokens written in the text match as whole tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| CoreError::Tokenizer(format!("encode failed: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Text of `ids`; `skip_special` drops tokens marked special (ChatML markers), keeping the rest.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        // The library silently drops unknown ids; an id the model drew from padded logits is a bug to report.
        if let Some(&bad) = ids.iter().find(|&&id| self.inner.id_to_token(id).is_none()) {
            return Err(CoreError::Tokenizer(format!(
                "token id {bad} is not in the vocabulary (size {})",
                self.vocab_size
            )));
        }
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| CoreError::Tokenizer(format!("decode failed: {e}")))
    }

    /// One past the highest id the tokenizer knows, added tokens included (the model may pad its logits
    /// beyond this).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Id of a token string (a vocabulary entry or an added token), if it exists.
    pub fn token_id(&self, s: &str) -> Option<u32> {
        self.inner.token_to_id(s)
    }

    /// Token string of an id, if it exists.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The `eos_token` of tokenizer_config.json, if any.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_token.as_deref()
    }

    /// Ids that end generation: `<|im_end|>` and `<|endoftext|>` when present, then the configured eos.
    pub fn stop_ids(&self) -> Vec<u32> {
        let mut ids = Vec::new();
        let names = STOP_TOKENS.iter().copied().chain(self.eos_token.as_deref());
        for id in names.filter_map(|name| self.token_id(name)) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }
}

/// Reads `dir/tokenizer_config.json` as a JSON object; `Ok(None)` when the file is absent.
pub(crate) fn read_tokenizer_config(dir: &Path) -> Result<Option<Map<String, Value>>> {
    let path: PathBuf = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| CoreError::io(&path, e))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| CoreError::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    match value {
        Value::Object(map) => Ok(Some(map)),
        _ => Err(CoreError::config(&path, "expected a JSON object")),
    }
}

/// The text of a special-token entry, written either as `"<|im_end|>"` or `{"content": "<|im_end|>", ...}`.
pub(crate) fn special_token_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Object(map) => map
            .get("content")
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// Byte length of the longest common prefix of `a` and `b` that ends on a character boundary.
fn common_prefix_len(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, ca), cb)| ca != cb)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
}

/// Incremental detokeniser for one stream: feed ids one at a time and get back only complete text.
///
/// Holds its own handle to the tokenizer, so it can live in a per-request struct. It decodes a short
/// window of recent ids and emits the new suffix once that suffix no longer ends in a partial character,
/// so the concatenation of all outputs (plus `finish`) equals `decode` of all ids.
#[derive(Debug, Clone)]
pub struct StreamDecoder {
    tokenizer: TextTokenizer,
    skip_special: bool,
    ids: Vec<u32>,
    /// Start of the window that gives the context for the next piece.
    prefix_offset: usize,
    /// End of the text already emitted.
    read_offset: usize,
    /// Decoded text of `ids[prefix_offset..read_offset]`.
    prefix_text: String,
}

impl StreamDecoder {
    /// A decoder for one stream; `skip_special` as in [`TextTokenizer::decode`].
    pub fn new(tokenizer: &TextTokenizer, skip_special: bool) -> StreamDecoder {
        StreamDecoder {
            tokenizer: tokenizer.clone(),
            skip_special,
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
            prefix_text: String::new(),
        }
    }

    /// Adds one id; returns the text it completes, or `None` while a character is still partial
    /// (or the id decodes to nothing, like a skipped special token).
    pub fn step(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let text = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..], self.skip_special)
            .inspect_err(|_| {
                self.ids.pop();
            })?;
        if text.len() <= self.prefix_text.len() || text.ends_with(REPLACEMENT) {
            return Ok(None);
        }
        let Some(piece) = self.new_suffix(&text) else {
            return Ok(None);
        };
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        self.prefix_text = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        self.trim_window();
        Ok(Some(piece))
    }

    /// Flushes whatever is still held back (a trailing partial character decodes as U+FFFD, as in
    /// `decode`) and starts over empty.
    pub fn finish(&mut self) -> Result<String> {
        let text = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        let rest = match self.new_suffix(&text) {
            Some(rest) => rest,
            // Only a context-dependent decoder gets here; emit what differs rather than lose text.
            None => text[common_prefix_len(&text, &self.prefix_text)..].to_owned(),
        };
        self.ids.clear();
        self.prefix_offset = 0;
        self.read_offset = 0;
        self.prefix_text.clear();
        Ok(rest)
    }

    /// The part of `text` after the prefix window's text, when `text` really extends it.
    fn new_suffix(&self, text: &str) -> Option<String> {
        text.strip_prefix(self.prefix_text.as_str())
            .map(str::to_owned)
    }

    /// Drops ids before the window so a long stream keeps constant memory per step.
    fn trim_window(&mut self) {
        if self.prefix_offset > 0 {
            self.ids.drain(..self.prefix_offset);
            self.read_offset -= self.prefix_offset;
            self.prefix_offset = 0;
        }
    }
}
