//! What every handler shares: the engine handle, the model's tokenizer, chat template and sampling defaults,
//! the server options and metrics. Loading a checkpoint's text assets fails with an error naming the file.

use crate::metrics::Metrics;
use crate::request::Limits;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tensorfold_core::chat::ChatTemplate;
use tensorfold_core::tokenizer::TextTokenizer;
use tensorfold_core::{CoreError, ModelConfig};
use tensorfold_engine::EngineHandle;

/// Sampling values used when a request names none (`generation_config.json`, else OpenAI's defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingDefaults {
    pub temperature: f32,
    pub top_p: f32,
    pub top_k: usize,
    pub min_p: f32,
    pub repetition_penalty: f32,
}

impl Default for SamplingDefaults {
    fn default() -> Self {
        SamplingDefaults {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            repetition_penalty: 1.0,
        }
    }
}

/// The served checkpoint's text side.
#[derive(Clone, Debug)]
pub struct ModelAssets {
    /// None for a checkpoint without `tokenizer.json`: it serves token ids only.
    pub tokenizer: Option<TextTokenizer>,
    pub template: Option<Arc<ChatTemplate>>,
    /// Ids that end a reply: the tokenizer's ChatML markers and the config's eos ids.
    pub stop_ids: Vec<u32>,
    /// The model's vocabulary size (may exceed the tokenizer's).
    pub vocab_size: usize,
    pub defaults: SamplingDefaults,
}

impl ModelAssets {
    /// Loads the tokenizer, chat template and generation defaults of the checkpoint in `dir`.
    pub fn from_dir(dir: &Path, config: &ModelConfig) -> Result<Self, CoreError> {
        let tokenizer = TextTokenizer::from_dir(dir)?;
        let template = ChatTemplate::from_dir(dir)?.map(Arc::new);
        let mut stop_ids = config.eos_token_ids.clone();
        if let Some(t) = &tokenizer {
            for id in t.stop_ids() {
                if !stop_ids.contains(&id) {
                    stop_ids.push(id);
                }
            }
        }
        let defaults = read_generation_defaults(dir)?;
        Ok(ModelAssets {
            tokenizer,
            template,
            stop_ids,
            vocab_size: config.vocab_size,
            defaults,
        })
    }
}

/// `generation_config.json`'s sampling values, where present.
fn read_generation_defaults(dir: &Path) -> Result<SamplingDefaults, CoreError> {
    let path = dir.join("generation_config.json");
    let mut d = SamplingDefaults::default();
    if !path.is_file() {
        return Ok(d);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| CoreError::io(&path, e))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| CoreError::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let num = |k: &str| v.get(k).and_then(Value::as_f64).filter(|x| x.is_finite());
    if v.get("do_sample").and_then(Value::as_bool) == Some(false) {
        d.temperature = 0.0;
    } else if let Some(t) = num("temperature").filter(|t| *t >= 0.0) {
        d.temperature = t as f32;
    }
    if let Some(p) = num("top_p").filter(|p| *p > 0.0 && *p <= 1.0) {
        d.top_p = p as f32;
    }
    if let Some(k) = num("top_k").filter(|k| *k >= 0.0) {
        d.top_k = k as usize;
    }
    if let Some(m) = num("min_p").filter(|m| (0.0..=1.0).contains(m)) {
        d.min_p = m as f32;
    }
    if let Some(r) = num("repetition_penalty").filter(|r| *r > 0.0) {
        d.repetition_penalty = r as f32;
    }
    Ok(d)
}

/// Server settings from the command line.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The model id in /v1/models and in responses.
    pub model_name: String,
    /// Accepted API keys; empty = no authentication.
    pub api_keys: Vec<String>,
    /// Largest reply a request may ask for, and the default; None = the context left after the prompt.
    pub max_tokens: Option<usize>,
    pub max_body_bytes: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            model_name: "tensorfold".into(),
            api_keys: Vec::new(),
            max_tokens: None,
            max_body_bytes: 8 << 20,
        }
    }
}

pub struct Inner {
    pub engine: EngineHandle,
    pub assets: ModelAssets,
    pub options: ServerOptions,
    pub metrics: Metrics,
    /// Unix time the server started (the model's `created`).
    pub created: u64,
}

/// Cheap to clone: one Arc.
#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

impl AppState {
    pub fn new(engine: EngineHandle, assets: ModelAssets, options: ServerOptions) -> Self {
        AppState(Arc::new(Inner {
            engine,
            assets,
            options,
            metrics: Metrics::default(),
            created: unix_now(),
        }))
    }

    pub fn context(&self) -> usize {
        self.0.engine.config().context
    }

    pub fn limits(&self) -> Limits {
        Limits {
            vocab: self.0.assets.vocab_size,
            max_tokens: self.0.options.max_tokens.unwrap_or(self.context()),
        }
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
