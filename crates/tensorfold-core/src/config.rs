//! `config.json` of a Qwen3.5 checkpoint in both published shapes (wrapper `qwen3_5` with `text_config`, flat
//! `qwen3_5_text`), including MLX `quantization`; every missing or wrong key is an error naming the file.

use crate::error::{CoreError, Result};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet (`linear_attention`).
    Linear,
    /// Gated full attention (`full_attention`).
    Full,
}

/// Bits and group size of one MLX affine-quantized module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantParams {
    pub bits: u32,
    pub group_size: usize,
}

/// The `quantization` object of an MLX checkpoint: defaults plus per-module overrides keyed by module path.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantConfig {
    pub default: QuantParams,
    pub mode: String,
    pub overrides: BTreeMap<String, QuantParams>,
}

pub const SUPPORTED_BITS: [u32; 6] = [2, 3, 4, 5, 6, 8];
pub const SUPPORTED_GROUPS: [usize; 3] = [32, 64, 128];

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub layer_types: Vec<LayerKind>,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub linear_num_key_heads: usize,
    pub linear_num_value_heads: usize,
    pub linear_key_head_dim: usize,
    pub linear_value_head_dim: usize,
    pub conv_kernel: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f64,
    /// Number of leading head dims that RoPE rotates (head_dim · partial_rotary_factor).
    pub rotary_dim: usize,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: usize,
    pub mtp_num_hidden_layers: usize,
    pub eos_token_ids: Vec<u32>,
    pub quantization: Option<QuantConfig>,
}

impl ModelConfig {
    pub fn num_layers(&self) -> usize {
        self.layer_types.len()
    }
    pub fn key_dim(&self) -> usize {
        self.linear_num_key_heads * self.linear_key_head_dim
    }
    pub fn value_dim(&self) -> usize {
        self.linear_num_value_heads * self.linear_value_head_dim
    }
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| CoreError::io(path, e))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| CoreError::Json {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::from_value(&value, path)
    }

    pub fn from_value(root: &Value, path: &Path) -> Result<Self> {
        let err = |m: String| CoreError::config(path, m);
        let top = root
            .as_object()
            .ok_or_else(|| err("top level is not a JSON object".into()))?;
        let top_type = top.get("model_type").and_then(Value::as_str).unwrap_or("");
        let t: &Map<String, Value> = match top.get("text_config") {
            Some(Value::Object(t)) => t,
            Some(_) => return Err(err("`text_config` is not an object".into())),
            None => top,
        };
        let text_type = t
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or(top_type);
        match (top_type, text_type) {
            ("qwen3_5", _) | (_, "qwen3_5_text") => {}
            ("qwen3_5_moe", _) | (_, "qwen3_5_moe_text") => {
                return Err(err(format!(
                    "model_type `{top_type}`: Qwen3.5-MoE checkpoints are not supported yet (dense qwen3_5 only)"
                )))
            }
            _ => {
                return Err(err(format!(
                    "unknown model_type `{top_type}` (text `{text_type}`); expected `qwen3_5` or `qwen3_5_text`"
                )))
            }
        }
        let keys = Keys { t, path };
        let num_layers = keys.usize("num_hidden_layers")?;
        let layer_types = match t.get("layer_types") {
            Some(Value::Array(items)) => {
                let mut kinds = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    kinds.push(match item.as_str() {
                        Some("linear_attention") => LayerKind::Linear,
                        Some("full_attention") => LayerKind::Full,
                        other => {
                            return Err(err(format!("layer_types[{i}] is {other:?}; expected `linear_attention` or `full_attention`")))
                        }
                    });
                }
                if kinds.len() != num_layers {
                    return Err(err(format!(
                        "layer_types has {} entries but num_hidden_layers is {num_layers}",
                        kinds.len()
                    )));
                }
                kinds
            }
            Some(_) => return Err(err("`layer_types` is not a list".into())),
            None => {
                let interval = keys.usize_or("full_attention_interval", 4)?;
                if interval == 0 {
                    return Err(err("full_attention_interval is 0".into()));
                }
                (0..num_layers)
                    .map(|i| {
                        if (i + 1) % interval == 0 {
                            LayerKind::Full
                        } else {
                            LayerKind::Linear
                        }
                    })
                    .collect()
            }
        };
        // rope: rope_parameters first, then the legacy top-level keys.
        let rope = t.get("rope_parameters").and_then(Value::as_object);
        let rope_scaling = t.get("rope_scaling").and_then(Value::as_object);
        let rope_f64 = |k: &str| {
            rope.and_then(|r| r.get(k))
                .and_then(Value::as_f64)
                .or_else(|| t.get(k).and_then(Value::as_f64))
                .or_else(|| rope_scaling.and_then(|r| r.get(k)).and_then(Value::as_f64))
        };
        if let Some(kind) = rope
            .or(rope_scaling)
            .and_then(|r| r.get("rope_type").or_else(|| r.get("type")))
            .and_then(Value::as_str)
        {
            if kind != "default" {
                return Err(err(format!(
                    "rope_type `{kind}` is not supported (only `default`)"
                )));
            }
        }
        let rope_theta = rope_f64("rope_theta").unwrap_or(10_000_000.0);
        let partial = rope_f64("partial_rotary_factor").unwrap_or(0.25);
        let head_dim = keys.usize("head_dim")?;
        let rotary_dim = (head_dim as f64 * partial).round() as usize;
        if !rotary_dim.is_multiple_of(2) || rotary_dim > head_dim {
            return Err(err(format!(
                "partial_rotary_factor {partial} gives {rotary_dim} rotary dims of head_dim {head_dim}; need an even number ≤ head_dim"
            )));
        }
        if t.get("attention_bias").and_then(Value::as_bool) == Some(true) {
            return Err(err(
                "attention_bias true is not supported (Qwen3.5 has no projection biases)".into(),
            ));
        }
        let tie = top
            .get("tie_word_embeddings")
            .or_else(|| t.get("tie_word_embeddings"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut eos = Vec::new();
        for source in [top.get("eos_token_id"), t.get("eos_token_id")]
            .into_iter()
            .flatten()
        {
            match source {
                Value::Number(n) => eos.extend(n.as_u64().map(|v| v as u32)),
                Value::Array(a) => eos.extend(a.iter().filter_map(Value::as_u64).map(|v| v as u32)),
                _ => {}
            }
        }
        eos.dedup();
        let quantization = match top
            .get("quantization")
            .or_else(|| top.get("quantization_config"))
        {
            Some(q) => Some(parse_quantization(q, path)?),
            None => None,
        };
        let cfg = ModelConfig {
            model_type: if top_type.is_empty() {
                text_type.to_string()
            } else {
                top_type.to_string()
            },
            vocab_size: keys.usize("vocab_size")?,
            hidden_size: keys.usize("hidden_size")?,
            intermediate_size: keys.usize("intermediate_size")?,
            layer_types,
            num_attention_heads: keys.usize("num_attention_heads")?,
            num_key_value_heads: keys.usize("num_key_value_heads")?,
            head_dim,
            linear_num_key_heads: keys.usize("linear_num_key_heads")?,
            linear_num_value_heads: keys.usize("linear_num_value_heads")?,
            linear_key_head_dim: keys.usize("linear_key_head_dim")?,
            linear_value_head_dim: keys.usize("linear_value_head_dim")?,
            conv_kernel: keys.usize_or("linear_conv_kernel_dim", 4)?,
            rms_norm_eps: t
                .get("rms_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-6) as f32,
            rope_theta,
            rotary_dim,
            tie_word_embeddings: tie,
            max_position_embeddings: keys.usize_or("max_position_embeddings", 262_144)?,
            mtp_num_hidden_layers: keys.usize_or("mtp_num_hidden_layers", 0)?,
            eos_token_ids: eos,
            quantization,
        };
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<()> {
        let err = |m: String| Err(CoreError::config(path, m));
        if self.num_key_value_heads == 0
            || !self
                .num_attention_heads
                .is_multiple_of(self.num_key_value_heads)
        {
            return err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if self.linear_num_key_heads == 0
            || !self
                .linear_num_value_heads
                .is_multiple_of(self.linear_num_key_heads)
        {
            return err(format!(
                "linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                self.linear_num_value_heads, self.linear_num_key_heads
            ));
        }
        if self.conv_kernel < 2 {
            return err(format!("linear_conv_kernel_dim {} < 2", self.conv_kernel));
        }
        if self.layer_types.is_empty() {
            return err("no layers".into());
        }
        Ok(())
    }

    /// Bits and group size the config declares for a module path (e.g. `language_model.model.layers.3.mlp.down_proj`).
    pub fn quant_params_for(&self, module: &str) -> Option<QuantParams> {
        let q = self.quantization.as_ref()?;
        Some(*q.overrides.get(module).unwrap_or(&q.default))
    }
}

fn parse_quantization(q: &Value, path: &Path) -> Result<QuantConfig> {
    let err = |m: String| CoreError::config(path, format!("quantization: {m}"));
    let obj = q.as_object().ok_or_else(|| err("not an object".into()))?;
    let params = |o: &Map<String, Value>, what: &str| -> Result<QuantParams> {
        let bits = o
            .get("bits")
            .and_then(Value::as_u64)
            .ok_or_else(|| err(format!("{what}: missing `bits`")))? as u32;
        let group_size =
            o.get("group_size")
                .and_then(Value::as_u64)
                .ok_or_else(|| err(format!("{what}: missing `group_size`")))? as usize;
        if !SUPPORTED_BITS.contains(&bits) {
            return Err(err(format!(
                "{what}: unsupported quantization bits {bits} (supported: 2, 3, 4, 5, 6, 8)"
            )));
        }
        if !SUPPORTED_GROUPS.contains(&group_size) {
            return Err(err(format!(
                "{what}: unsupported group_size {group_size} (supported: 32, 64, 128)"
            )));
        }
        Ok(QuantParams { bits, group_size })
    };
    let mode = obj
        .get("mode")
        .and_then(Value::as_str)
        .unwrap_or("affine")
        .to_string();
    if mode != "affine" {
        return Err(err(format!("mode `{mode}` is not supported (affine only)")));
    }
    let default = params(obj, "defaults")?;
    let mut overrides = BTreeMap::new();
    for (k, v) in obj {
        if let Value::Object(o) = v {
            overrides.insert(k.clone(), params(o, k)?);
        }
    }
    Ok(QuantConfig {
        default,
        mode,
        overrides,
    })
}

struct Keys<'a> {
    t: &'a Map<String, Value>,
    path: &'a Path,
}

impl Keys<'_> {
    fn usize(&self, key: &str) -> Result<usize> {
        match self.t.get(key) {
            Some(v) => v.as_u64().map(|v| v as usize).ok_or_else(|| {
                CoreError::config(
                    self.path,
                    format!("`{key}` is {v}, expected a non-negative integer"),
                )
            }),
            None => Err(CoreError::config(self.path, format!("missing key `{key}`"))),
        }
    }
    fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        if self.t.contains_key(key) {
            self.usize(key)
        } else {
            Ok(default)
        }
    }
}
