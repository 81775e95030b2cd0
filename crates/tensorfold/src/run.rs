//! `tensorfold run`: load a checkpoint, build the prompt (text, chat or ids), decode it through the engine (drafted
//! unless `--no-drafts`; the tokens are the same either way), stream text to stdout and speeds and tokens per
//! round to stderr; optionally a JSON summary and the prompt's teacher-forced logits.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::Backend;
use tensorfold_core::chat::{ChatRenderRequest, ChatTemplate};
use tensorfold_core::sampling::{seed_from_prompt, token_sha, SamplingParams};
use tensorfold_core::tokenizer::{StreamDecoder, TextTokenizer};
use tensorfold_core::Checkpoint;
use tensorfold_engine::{generate, EngineConfig, Event, GenerateRequest, Request, Usage};

/// The prompt of a bare `tensorfold run`: the start of a Python function, which the built-in code model continues.
const DEFAULT_PROMPT: &str = "import os\n\n\ndef list_python_files(path):\n";
use tensorfold_model::Qwen35;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Checkpoint directory (default: the built-in model).
    #[arg(long, env = "TENSORFOLD_MODEL")]
    pub model: Option<PathBuf>,
    /// Prompt text (needs a tokenizer in the checkpoint).
    #[arg(long, conflicts_with = "prompt_ids")]
    pub prompt: Option<String>,
    /// Wrap the prompt as one user message in the checkpoint's chat template.
    #[arg(long, requires = "prompt")]
    pub chat: bool,
    /// Prompt as comma-separated token ids.
    #[arg(long, value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Sampling seed (default: derived from the prompt ids).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep going past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON summary object as the last stdout line.
    #[arg(long)]
    pub json: bool,
    /// Write the teacher-forced logits of every prompt position to this safetensors file (`prompt_logits`).
    #[arg(long)]
    pub logits_out: Option<PathBuf>,
    /// Prompt rows per prefill round.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Decode one token per round, without context copies or the MTP head (same tokens, no speculation).
    #[arg(long)]
    pub no_drafts: bool,
    /// Where to run the model (cuda needs a binary built with `--features cuda` and an NVIDIA GPU).
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: crate::check::Device,
    /// How the KV cache stores keys and values: f32 (closest to the float64 reference), or bf16 (twice the tokens
    /// in the same memory; on the GPU up to 4% slower at short contexts, within 1% at long ones; every equality
    /// still holds; see README).
    #[arg(long, default_value = "f32")]
    pub kv_cache_dtype: tensorfold_backend::KvDtype,
}

pub fn init_threads(threads: Option<usize>) {
    if let Some(n) = threads {
        // Ignored if the global pool already exists (tests call this more than once).
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global();
    }
}

/// Opens a checkpoint, with a progress bar on a terminal while mapping shards.
pub fn open_checkpoint(dir: &Path) -> Result<Checkpoint> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("loading {wide_bar} {pos}/{len} files")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let ck = Checkpoint::open(dir, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    });
    bar.finish_and_clear();
    Ok(ck?)
}

pub fn run(args: RunArgs) -> Result<()> {
    init_threads(args.threads);
    let dir = args.model.clone().unwrap_or_else(crate::default_model_dir);
    let ck = open_checkpoint(&dir)?;
    let tokenizer = TextTokenizer::from_dir(&dir)?;
    let prompt: Vec<u32> = match (&args.prompt_ids, &args.prompt) {
        (Some(ids), _) => ids.clone(),
        (None, text) => {
            let Some(tok) = tokenizer.as_ref() else {
                bail!(
                    "{}: no tokenizer.json, so the prompt must be given as --prompt-ids",
                    dir.display()
                );
            };
            let text = text.clone().unwrap_or_else(|| DEFAULT_PROMPT.to_string());
            let text = if args.chat {
                let template = ChatTemplate::from_dir(&dir)?
                    .with_context(|| format!("{}: --chat needs a chat template", dir.display()))?;
                template.render(&ChatRenderRequest {
                    messages: serde_json::json!([{"role": "user", "content": text}]),
                    tools: None,
                    add_generation_prompt: true,
                    enable_thinking: None,
                    extra: Default::default(),
                })?
            } else {
                text
            };
            tok.encode(&text)?
        }
    };
    match args.device {
        crate::check::Device::Cpu => {
            let model = Qwen35::load(&ck, CpuBackend::default().with_kv_dtype(args.kv_cache_dtype))?;
            decode(&args, &ck, tokenizer, prompt, model)
        }
        #[cfg(feature = "cuda")]
        crate::check::Device::Cuda => {
            let model = crate::cuda::load(&ck, args.kv_cache_dtype)?;
            decode(&args, &ck, tokenizer, prompt, model)
        }
        #[cfg(not(feature = "cuda"))]
        crate::check::Device::Cuda => bail!(
            "--device cuda: this binary was built without CUDA (cargo build --release --features cuda)"
        ),
    }
}

/// Decodes `prompt` through an engine on `model`'s device, streaming text to stdout and speeds to stderr.
fn decode<B: Backend>(
    args: &RunArgs,
    ck: &Checkpoint,
    tokenizer: Option<TextTokenizer>,
    prompt: Vec<u32>,
    model: Qwen35<B>,
) -> Result<()> {
    let mut stop_ids = ck.config.eos_token_ids.clone();
    if let Some(tok) = &tokenizer {
        stop_ids.extend(tok.stop_ids());
    }
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        seed: args.seed.unwrap_or_else(|| seed_from_prompt(&prompt)),
    };
    // Teacher-forced prompt logits come from a prefill alone; the reply itself is the engine's.
    let prompt_logits = match &args.logits_out {
        Some(_) => {
            let req = GenerateRequest {
                prompt: prompt.clone(),
                max_tokens: 0,
                sampling: sampling.clone(),
                penalties: tensorfold_engine::Penalties::default(),
                stop_ids: Vec::new(),
                ignore_eos: true,
                prefill_chunk: args.prefill_chunk,
                want_prompt_logits: true,
            };
            generate(&model, &req, |_| true)?.prompt_logits
        }
        None => None,
    };
    let (format, vocab) = (model.format.clone(), model.config.vocab_size);
    let engine = tensorfold_engine::spawn(
        model,
        EngineConfig {
            parallel: 1,
            context: prompt.len() + args.max_tokens,
            prompt_cache_bytes: 0,
            prefill_chunk: args.prefill_chunk.max(1),
            drafts: !args.no_drafts,
            ..EngineConfig::default()
        },
    );
    let mut req = Request::greedy(prompt.clone(), args.max_tokens);
    req.sampling = sampling;
    req.stop_ids = stop_ids;
    req.ignore_eos = args.ignore_eos;
    req.draft = !args.no_drafts;
    let mut rx = engine.submit(req).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut stream = tokenizer.as_ref().map(|t| StreamDecoder::new(t, false));
    let mut stdout = std::io::stdout().lock();
    let mut text = String::new();
    let mut tokens = Vec::new();
    let mut done = None;
    let mut textless = 0usize;
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            Event::Token { id, .. } => {
                tokens.push(id);
                let piece = match stream.as_mut() {
                    // Ids past the tokenizer's vocabulary (padded logit rows) have no text: skip them, say so.
                    Some(s) => s
                        .step(id)
                        .unwrap_or_else(|_| {
                            textless += 1;
                            None
                        })
                        .unwrap_or_default(),
                    None => format!("{id} "),
                };
                text.push_str(&piece);
                if !args.json {
                    let _ = stdout.write_all(piece.as_bytes());
                    let _ = stdout.flush();
                }
            }
            Event::Done {
                finish,
                usage,
                first_token_secs,
                total_secs,
                ..
            } => {
                done = Some((finish, usage, first_token_secs, total_secs));
                break;
            }
            Event::Error(e) => bail!("{e}"),
        }
    }
    engine.shutdown();
    let Some((finish, usage, first_secs, total_secs)) = done else {
        bail!("the engine stopped without finishing the reply");
    };
    if let Some(s) = stream.as_mut() {
        let rest = s.finish()?;
        text.push_str(&rest);
        if !args.json {
            let _ = stdout.write_all(rest.as_bytes());
        }
    }
    if !args.json {
        let _ = writeln!(stdout);
    }
    let prompt_tok_s = prompt.len() as f64 / first_secs.max(1e-9);
    let decode_rows = tokens.len().saturating_sub(1);
    let decode_tok_s = decode_rows as f64 / (total_secs - first_secs).max(1e-9);
    let Usage {
        drafted,
        accepted,
        rounds,
        ..
    } = usage;
    eprintln!(
        "prompt: {} tokens, {:.1} tok/s | decode: {} tokens, {:.1} tok/s | {:?} | {}",
        prompt.len(),
        prompt_tok_s,
        tokens.len(),
        decode_tok_s,
        finish,
        format
    );
    eprintln!(
        "rounds: {rounds}, {:.2} tokens per round | drafted {drafted}, accepted {accepted}{}",
        tokens.len() as f64 / rounds.max(1) as f64,
        if args.no_drafts { " (--no-drafts)" } else { "" }
    );
    let stats = engine.stats();
    let t = &stats.times;
    let per_round = |us: u64| us as f64 / 1e3 / stats.rounds_total.max(1) as f64;
    eprintln!(
        "engine thread, ms a round: forward {:.3} | keep {:.3} | waiting for draws {:.3} | walk {:.3} | drafting {:.3} | snapshots {:.3} | other {:.3}",
        per_round(t.forward_us),
        per_round(t.keep_us),
        per_round(t.wait_us),
        per_round(t.walk_us),
        per_round(t.draft_us),
        per_round(t.snapshot_us),
        per_round(t.other_us)
    );
    let costs = stats.round_costs_us;
    if !costs.is_empty() {
        let list: Vec<String> = costs
            .iter()
            .map(|&(r, us)| format!("{r}: {:.1}", us as f64 / 1e3))
            .collect();
        eprintln!(
            "round ms by rows, timed at start for the window planner: {}",
            list.join(", ")
        );
    }
    if textless > 0 {
        eprintln!(
            "note: {textless} drawn ids are outside the tokenizer's vocabulary and print no text"
        );
    }
    if let Some(path) = &args.logits_out {
        let logits = prompt_logits.as_deref().unwrap_or_default();
        write_logits(path, logits, prompt.len(), vocab)?;
    }
    if args.json {
        let summary = serde_json::json!({
            "tokens": tokens,
            "token_sha": token_sha(&tokens),
            "text": if tokenizer.is_some() { serde_json::Value::String(text) } else { serde_json::Value::Null },
            "prompt_tokens": prompt.len(),
            "prompt_tok_s": prompt_tok_s,
            "decode_tok_s": decode_tok_s,
            "finish_reason": finish.as_str(),
            "drafted": drafted,
            "accepted": accepted,
            "rounds": rounds,
        });
        writeln!(stdout, "{summary}")?;
    }
    Ok(())
}

fn write_logits(path: &Path, logits: &[f32], rows: usize, vocab: usize) -> Result<()> {
    let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![rows, vocab], &bytes)
            .context("building the prompt_logits tensor")?;
    safetensors::serialize_to_file([("prompt_logits", view)], None, path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
