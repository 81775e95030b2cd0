//! `tensorfold synth`: writes a random-weight checkpoint of a published Qwen3.5 shape, in bf16 (HF layout) or
//! MLX affine 4-bit (mlx-lm layout), streamed to disk shard by shard so even the 27B shape needs little RAM, with a
//! tokenizer and chat template (synth_tokenizer.rs) so it can be served.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::json;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Shape {
    #[value(name = "0.8b")]
    Q0_8b,
    #[value(name = "2b")]
    Q2b,
    #[value(name = "4b")]
    Q4b,
    #[value(name = "9b")]
    Q9b,
    #[value(name = "27b")]
    Q27b,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum Format {
    Bf16,
    Mlx4,
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    #[arg(long, value_enum)]
    pub shape: Shape,
    #[arg(long, value_enum, default_value = "bf16")]
    pub format: Format,
    #[arg(long)]
    pub out: PathBuf,
    /// Override the number of layers (keeps the 3:1 DeltaNet:attention pattern), for quicker experiments.
    #[arg(long)]
    pub layers: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Threads drawing the weights. Above 1 each tensor draws from its own seed (derived from --seed and its place
    /// in the file), so the values differ from one thread's; a whole 27B bf16 checkpoint then takes seconds, not
    /// minutes.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Also write an MTP head (`mtp.*`, one full-attention block of the shape's dims, as the published
    /// checkpoints have), so the head's drafting can be timed at real sizes.
    #[arg(long)]
    pub mtp: bool,
}

pub(crate) struct Dims {
    hidden: usize,
    layers: usize,
    inter: usize,
    heads: usize,
    kv: usize,
    hk: usize,
    hv: usize,
    tied: bool,
}

pub(crate) fn dims(shape: Shape) -> Dims {
    let d = |hidden, layers, inter, heads, kv, hk, hv, tied| Dims {
        hidden,
        layers,
        inter,
        heads,
        kv,
        hk,
        hv,
        tied,
    };
    match shape {
        Shape::Q0_8b => d(1024, 24, 3584, 8, 2, 16, 16, true),
        Shape::Q2b => d(2048, 24, 6144, 8, 2, 16, 16, true),
        Shape::Q4b => d(2560, 32, 9216, 16, 4, 16, 32, true),
        Shape::Q9b => d(4096, 32, 12288, 16, 4, 16, 32, false),
        Shape::Q27b => d(5120, 64, 17408, 24, 4, 16, 48, false),
    }
}

const VOCAB: usize = 248_320;
const HEAD_DIM: usize = 256;
const LIN_DIM: usize = 128;
const CONV_K: usize = 4;
const GROUP: usize = 64;
const SHARD_BYTES: usize = 4 << 30;

/// What one tensor holds: random projection weights, a constant, or small random values.
#[derive(Clone, Copy)]
enum Fill {
    Weight,
    Const(f32),
    Small,
}

struct Planned {
    name: String,
    shape: Vec<usize>,
    fill: Fill,
    /// Quantize to MLX 4-bit (`.weight` U32 + `.scales` + `.biases`).
    quantized: bool,
}

fn plan(d: &Dims, layers: usize, mlx: bool, mtp: bool) -> Vec<Planned> {
    let (pre, head) = if mlx {
        ("language_model.model.", "language_model.lm_head")
    } else {
        ("model.language_model.", "lm_head")
    };
    let mut v = Vec::new();
    let mut lin = |name: String, rows: usize, cols: usize| {
        v.push(Planned {
            name,
            shape: vec![rows, cols],
            fill: Fill::Weight,
            quantized: mlx,
        })
    };
    let h = d.hidden;
    lin(format!("{pre}embed_tokens"), VOCAB, h);
    if !d.tied {
        lin(head.to_string(), VOCAB, h);
    }
    let key_dim = d.hk * LIN_DIM;
    let value_dim = d.hv * LIN_DIM;
    let conv = 2 * key_dim + value_dim;
    for i in 0..layers {
        let p = format!("{pre}layers.{i}");
        if (i + 1) % 4 == 0 {
            lin(format!("{p}.self_attn.q_proj"), d.heads * HEAD_DIM * 2, h);
            lin(format!("{p}.self_attn.k_proj"), d.kv * HEAD_DIM, h);
            lin(format!("{p}.self_attn.v_proj"), d.kv * HEAD_DIM, h);
            lin(format!("{p}.self_attn.o_proj"), h, d.heads * HEAD_DIM);
        } else {
            lin(format!("{p}.linear_attn.in_proj_qkv"), conv, h);
            lin(format!("{p}.linear_attn.in_proj_z"), value_dim, h);
            lin(format!("{p}.linear_attn.in_proj_b"), d.hv, h);
            lin(format!("{p}.linear_attn.in_proj_a"), d.hv, h);
            lin(format!("{p}.linear_attn.out_proj"), h, value_dim);
        }
        lin(format!("{p}.mlp.gate_proj"), d.inter, h);
        lin(format!("{p}.mlp.up_proj"), d.inter, h);
        lin(format!("{p}.mlp.down_proj"), h, d.inter);
    }
    if mtp {
        // Top-level `mtp.*` in both layouts (the loader binds them so); quantized like the rest in MLX 4-bit.
        let p = "mtp.layers.0";
        lin("mtp.fc".into(), h, 2 * h);
        lin(format!("{p}.self_attn.q_proj"), d.heads * HEAD_DIM * 2, h);
        lin(format!("{p}.self_attn.k_proj"), d.kv * HEAD_DIM, h);
        lin(format!("{p}.self_attn.v_proj"), d.kv * HEAD_DIM, h);
        lin(format!("{p}.self_attn.o_proj"), h, d.heads * HEAD_DIM);
        lin(format!("{p}.mlp.gate_proj"), d.inter, h);
        lin(format!("{p}.mlp.up_proj"), d.inter, h);
        lin(format!("{p}.mlp.down_proj"), h, d.inter);
    }
    // Zero-centred norms: HF stores w = 0 (applied as 1 + w); MLX stores 1 + w = 1.
    let norm = if mlx { 1.0 } else { 0.0 };
    let mut small = |name: String, shape: Vec<usize>, fill: Fill| {
        v.push(Planned {
            name,
            shape,
            fill,
            quantized: false,
        })
    };
    small(format!("{pre}norm.weight"), vec![h], Fill::Const(norm));
    if mtp {
        for n in [
            "mtp.pre_fc_norm_embedding",
            "mtp.pre_fc_norm_hidden",
            "mtp.norm",
            "mtp.layers.0.input_layernorm",
            "mtp.layers.0.post_attention_layernorm",
        ] {
            small(format!("{n}.weight"), vec![h], Fill::Const(norm));
        }
        for n in ["q_norm", "k_norm"] {
            small(
                format!("mtp.layers.0.self_attn.{n}.weight"),
                vec![HEAD_DIM],
                Fill::Const(norm),
            );
        }
    }
    for i in 0..layers {
        let p = format!("{pre}layers.{i}");
        small(
            format!("{p}.input_layernorm.weight"),
            vec![h],
            Fill::Const(norm),
        );
        small(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            Fill::Const(norm),
        );
        if (i + 1) % 4 == 0 {
            small(
                format!("{p}.self_attn.q_norm.weight"),
                vec![HEAD_DIM],
                Fill::Const(norm),
            );
            small(
                format!("{p}.self_attn.k_norm.weight"),
                vec![HEAD_DIM],
                Fill::Const(norm),
            );
        } else {
            let conv_shape = if mlx {
                vec![conv, CONV_K, 1]
            } else {
                vec![conv, 1, CONV_K]
            };
            small(
                format!("{p}.linear_attn.conv1d.weight"),
                conv_shape,
                Fill::Small,
            );
            small(format!("{p}.linear_attn.A_log"), vec![d.hv], Fill::Small);
            small(format!("{p}.linear_attn.dt_bias"), vec![d.hv], Fill::Small);
            small(
                format!("{p}.linear_attn.norm.weight"),
                vec![LIN_DIM],
                Fill::Const(1.0),
            );
        }
    }
    v
}

pub(crate) fn config(
    shape: Shape,
    d: &Dims,
    layers: usize,
    mlx: bool,
    mtp: bool,
) -> serde_json::Value {
    let layer_types: Vec<&str> = (0..layers)
        .map(|i| {
            if (i + 1) % 4 == 0 {
                "full_attention"
            } else {
                "linear_attention"
            }
        })
        .collect();
    let mut cfg = json!({
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "tie_word_embeddings": d.tied,
        "eos_token_id": 248046,
        "synthetic_shape": format!("{shape:?}"),
        "text_config": {
            "model_type": "qwen3_5_text",
            "vocab_size": VOCAB, "hidden_size": d.hidden, "intermediate_size": d.inter,
            "num_hidden_layers": layers, "num_attention_heads": d.heads, "num_key_value_heads": d.kv,
            "head_dim": HEAD_DIM, "linear_num_key_heads": d.hk, "linear_num_value_heads": d.hv,
            "linear_key_head_dim": LIN_DIM, "linear_value_head_dim": LIN_DIM, "linear_conv_kernel_dim": CONV_K,
            "layer_types": layer_types, "full_attention_interval": 4, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "attn_output_gate": true, "tie_word_embeddings": d.tied,
            "max_position_embeddings": 262144, "mtp_num_hidden_layers": usize::from(mtp), "eos_token_id": 248044,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                                "mrope_section": [11, 11, 10], "mrope_interleaved": true}
        }
    });
    if mlx {
        let q = json!({"group_size": GROUP, "bits": 4, "mode": "affine"});
        cfg["quantization"] = q.clone();
        cfg["quantization_config"] = q;
    }
    cfg
}

/// xorshift64*: fast deterministic noise for weights nobody reads for meaning.
struct Noise(u64);
impl Noise {
    /// A stream for `seed` (never the all-zero state).
    fn seeded(seed: u64) -> Noise {
        Noise(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-a, a).
    fn uniform(&mut self, a: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a
    }
}

fn bf16_bytes(values: impl Iterator<Item = f32>) -> Vec<u8> {
    values
        .flat_map(|v| half::bf16::from_f32(v).to_bits().to_le_bytes())
        .collect()
}

/// A tensor ready to write: (name, safetensors dtype, shape, little-endian bytes).
type StoredTensor = (String, &'static str, Vec<usize>, Vec<u8>);

/// The stored tensors of one planned entry: (name, dtype, shape, bytes).
fn materialize(p: &Planned, noise: &mut Noise) -> Vec<StoredTensor> {
    let n: usize = p.shape.iter().product();
    let std = match p.shape.last() {
        Some(&cols) => 1.0 / (cols as f32).sqrt(),
        None => 0.02,
    };
    if p.quantized {
        let (rows, cols) = (p.shape[0], p.shape[1]);
        let words = rows * cols / 8;
        let codes: Vec<u8> = (0..words / 2)
            .flat_map(|_| noise.next().to_le_bytes())
            .collect();
        let groups = rows * cols / GROUP;
        // Codes 0..15 around the middle: w = s·q + b with b = −7.5·s spans [−7.5s, 7.5s].
        let s = std * 1.7 / 7.5;
        let scales = bf16_bytes(std::iter::repeat_n(s, groups));
        let biases = bf16_bytes(std::iter::repeat_n(-7.5 * s, groups));
        return vec![
            (
                format!("{}.weight", p.name),
                "U32",
                vec![rows, cols / 8],
                codes,
            ),
            (
                format!("{}.scales", p.name),
                "BF16",
                vec![rows, cols / GROUP],
                scales,
            ),
            (
                format!("{}.biases", p.name),
                "BF16",
                vec![rows, cols / GROUP],
                biases,
            ),
        ];
    }
    let name =
        if p.name.ends_with(".weight") || p.name.contains("A_log") || p.name.contains("dt_bias") {
            p.name.clone()
        } else {
            format!("{}.weight", p.name)
        };
    let bytes = match p.fill {
        Fill::Weight => bf16_bytes((0..n).map(|_| noise.uniform(std * 1.7))),
        Fill::Const(c) => bf16_bytes(std::iter::repeat_n(c, n)),
        Fill::Small => bf16_bytes((0..n).map(|_| noise.uniform(0.5))),
    };
    vec![(name, "BF16", p.shape.clone(), bytes)]
}

/// Writes one safetensors file by hand (8-byte header length, JSON header, data) so tensors can be generated
/// and streamed one at a time instead of holding a whole multi-GB shard in memory.
fn write_shard(
    path: &Path,
    tensors: &[(String, &'static str, Vec<usize>, usize)],
    mut fill: impl FnMut(usize) -> Vec<u8>,
) -> Result<()> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, dtype, shape, len) in tensors {
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len]}),
        );
        offset += len;
    }
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::with_capacity(1 << 22, file);
    w.write_all(&(text.len() as u64).to_le_bytes())?;
    w.write_all(text.as_bytes())?;
    for (i, (name, _, _, len)) in tensors.iter().enumerate() {
        let bytes = fill(i);
        if bytes.len() != *len {
            bail!(
                "internal: tensor {name} produced {} bytes, planned {len}",
                bytes.len()
            );
        }
        w.write_all(&bytes)?;
    }
    w.flush()?;
    Ok(())
}

pub fn synth(args: SynthArgs) -> Result<()> {
    let d = dims(args.shape);
    let layers = args.layers.unwrap_or(d.layers);
    let mlx = args.format == Format::Mlx4;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let planned = plan(&d, layers, mlx, args.mtp);
    // Materialize lazily in plan order, grouping into shards by stored size.
    let mut noise = Noise::seeded(args.seed);
    let mut shards: Vec<Vec<StoredTensor>> = vec![Vec::new()];
    let mut shard_bytes = 0usize;
    let mut weight_map = serde_json::Map::new();
    let mut total = 0usize;
    let flush = |idx: usize, tensors: &[StoredTensor]| -> Result<String> {
        let name = format!("model-{:05}.safetensors", idx + 1);
        let meta: Vec<_> = tensors
            .iter()
            .map(|(n, d, s, b)| (n.clone(), *d, s.clone(), b.len()))
            .collect();
        write_shard(&args.out.join(&name), &meta, |i| tensors[i].3.clone())?;
        Ok(name)
    };
    let mut names = Vec::new();
    // One entry at a time from the shared stream, or `threads` entries at once, each from its own stream.
    let batch = args.threads.max(1);
    let pool = (batch > 1)
        .then(|| rayon::ThreadPoolBuilder::new().num_threads(batch).build())
        .transpose()
        .context("synth threads")?;
    for (b, chunk) in planned.chunks(batch).enumerate() {
        let made: Vec<Vec<StoredTensor>> = match &pool {
            None => chunk.iter().map(|p| materialize(p, &mut noise)).collect(),
            Some(pool) => pool.install(|| {
                use rayon::prelude::*;
                chunk
                    .par_iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let place = (b * batch + i) as u64 + 1;
                        let mut own =
                            Noise::seeded(args.seed ^ place.wrapping_mul(0xD1B5_4A32_D192_ED03));
                        materialize(p, &mut own)
                    })
                    .collect()
            }),
        };
        for t in made.into_iter().flatten() {
            shard_bytes += t.3.len();
            total += t.3.len();
            shards.last_mut().expect("one shard always open").push(t);
        }
        if shard_bytes >= SHARD_BYTES {
            let idx = shards.len() - 1;
            let name = flush(idx, &shards[idx])?;
            for t in &shards[idx] {
                weight_map.insert(t.0.clone(), json!(name));
            }
            names.push(name);
            shards[idx].clear();
            shards.push(Vec::new());
            shard_bytes = 0;
        }
    }
    let idx = shards.len() - 1;
    if !shards[idx].is_empty() {
        let name = flush(idx, &shards[idx])?;
        for t in &shards[idx] {
            weight_map.insert(t.0.clone(), json!(name));
        }
        names.push(name);
    }
    let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    std::fs::write(
        args.out.join("model.safetensors.index.json"),
        serde_json::to_string_pretty(&index)?,
    )?;
    std::fs::write(
        args.out.join("config.json"),
        serde_json::to_string_pretty(&config(args.shape, &d, layers, mlx, args.mtp))?,
    )?;
    crate::synth_tokenizer::write(&args.out, VOCAB)?;
    eprintln!(
        "wrote {} ({} files, {:.2} GB of tensors, and a word-per-id tokenizer)",
        args.out.display(),
        names.len(),
        total as f64 / 1e9
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{config, dims, plan, Shape};

    #[test]
    fn an_mtp_head_is_the_fifteen_tensors_of_a_published_checkpoint_in_the_shapes_dims() {
        let d = dims(Shape::Q27b);
        for mlx in [false, true] {
            let with = plan(&d, 4, mlx, true);
            let without = plan(&d, 4, mlx, false);
            let head: Vec<_> = with.iter().filter(|p| p.name.starts_with("mtp.")).collect();
            assert_eq!(head.len(), 15);
            assert_eq!(with.len(), without.len() + 15);
            let shape = |n: &str| head.iter().find(|p| p.name == n).map(|p| p.shape.clone());
            assert_eq!(shape("mtp.fc"), Some(vec![5120, 10240]));
            assert_eq!(
                shape("mtp.layers.0.self_attn.q_proj"),
                Some(vec![24 * 256 * 2, 5120])
            );
            assert_eq!(shape("mtp.layers.0.mlp.down_proj"), Some(vec![5120, 17408]));
            assert_eq!(
                shape("mtp.layers.0.self_attn.k_norm.weight"),
                Some(vec![256])
            );
            // Matrices quantized with the rest in MLX 4-bit, norms never.
            assert!(head
                .iter()
                .all(|p| p.quantized == (mlx && !p.name.ends_with(".weight"))));
        }
        let cfg = |mtp| {
            config(Shape::Q27b, &d, 4, false, mtp)["text_config"]["mtp_num_hidden_layers"].clone()
        };
        assert_eq!((cfg(true), cfg(false)), (1.into(), 0.into()));
    }
}
