//! `tensorfold bench`: prefill and decode speed of a checkpoint on the CPU, with this machine's memory read
//! bandwidth measured in the same run as the denominator of the decode ratio.

use anyhow::Result;
use clap::Args;
use rayon::prelude::*;
use std::path::PathBuf;
use std::time::Instant;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_core::sampling::{token_sha, SamplingParams};
use tensorfold_engine::{generate, GenerateRequest};
use tensorfold_model::Qwen35;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Prompt length for the prefill measurement.
    #[arg(long, default_value_t = 128)]
    pub prompt_tokens: usize,
    /// Tokens decoded for the decode measurement.
    #[arg(long, default_value_t = 32)]
    pub decode_tokens: usize,
    #[arg(long)]
    pub threads: Option<usize>,
    /// Repeat the measurement and keep the best of N.
    #[arg(long, default_value_t = 2)]
    pub repeat: usize,
    /// Measure round costs (window rows, streams) and prompt-cache resume instead.
    #[arg(long)]
    pub rounds: bool,
    /// Committed tokens before the measured rounds (with --rounds).
    #[arg(long, default_value_t = 64)]
    pub context: usize,
    /// Prompt length of the prompt-cache measurement (with --rounds).
    #[arg(long, default_value_t = 512)]
    pub long_prompt: usize,
    /// Drafted against plain decoding on a rewrite, new code and prose, alternating (see bench_drafts.rs).
    #[arg(long)]
    pub drafts: bool,
    /// Most tokens of the code file in the rewrite prompt (with --drafts; the default takes the whole file).
    #[arg(long, default_value_t = 2048)]
    pub rewrite_tokens: usize,
    /// Which drafters the drafted replies use (with --drafts): copies, the MTP head, or both.
    #[arg(long, value_enum, default_value = "both")]
    pub drafters: crate::bench_drafts::Drafters,
    /// Code files (with --drafts): instead of the three fixed prompts, per file a whole-file rewrite and a
    /// continuation of its first `--prefix-tokens`; one drafted and one plain reply each, acceptance summed.
    #[arg(long, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Prompt of the continuation (with --files): the file's first lines up to at least this many tokens.
    #[arg(long, default_value_t = 256)]
    pub prefix_tokens: usize,
    /// With --files: draft at full width every round (copies up to the engine's `max_draft`, 64; MTP chains of 4)
    /// instead of the widths the cost planner picks, to show each drafter's own acceptance.
    #[arg(long)]
    pub fixed_widths: bool,
    /// Where to run: the CPU, or the GPU sweep (copy bandwidth, decode vs bound, rounds, streams, prefill).
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: crate::check::Device,
    /// How the KV cache stores keys and values: f32 (closest to the float64 reference), or bf16 (twice the tokens
    /// in the same memory; on the GPU up to 4% slower at short contexts, within 1% at long ones; every equality
    /// still holds; see README).
    #[arg(long, default_value = "f32")]
    pub kv_cache_dtype: tensorfold_backend::KvDtype,
    /// Prompt lengths of the prefill measurement (with --device cuda).
    #[arg(long, value_delimiter = ',', default_value = "2048")]
    pub prefill_lens: Vec<usize>,
    /// With --device cuda: prompt rows per forward of the prefill measurement (`serve --prefill-chunk`).
    #[arg(long, default_value_t = 2048)]
    pub prefill_chunk: usize,
    /// With --device cuda: only decode, rounds of 1 and 16 rows and prefill (comparing kernel layouts in one run).
    #[arg(long)]
    pub quick: bool,
    /// With --device cuda: only each --prefill-lens prefill and one-stream decode at its context (comparing
    /// attention kernels in one run; --quick, --repeat and --round-rows do not apply).
    #[arg(long)]
    pub at_context: bool,
    /// With --device cuda: the rows of the rounds measured (default 1, 2, 4, 8, 16, 32, 64; with --quick 1, 16);
    /// include 1 for the ratios to one row.
    #[arg(long, value_delimiter = ',')]
    pub round_rows: Vec<usize>,
}

/// Best-of-5 parallel read bandwidth over a 1 GiB buffer, in bytes per second.
pub fn read_bandwidth() -> f64 {
    let words = (1usize << 30) / 8;
    let buf: Vec<u64> = (0..words as u64).collect();
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t = Instant::now();
        let sum: u64 = buf
            .par_chunks(1 << 16)
            .map(|c| c.iter().fold(0u64, |a, &b| a.wrapping_add(b)))
            .sum();
        let secs = t.elapsed().as_secs_f64();
        std::hint::black_box(sum);
        best = best.max((words * 8) as f64 / secs);
    }
    best
}

pub fn bench(args: BenchArgs) -> Result<()> {
    crate::run::init_threads(args.threads);
    let dir = args.model.clone().unwrap_or_else(crate::default_model_dir);
    if args.device == crate::check::Device::Cuda {
        #[cfg(feature = "cuda")]
        if args.drafts {
            let model =
                crate::cuda::load(&crate::run::open_checkpoint(&dir)?, args.kv_cache_dtype)?;
            return drafts(model, &dir, &args);
        }
        #[cfg(feature = "cuda")]
        return crate::cuda::bench(&dir, &args);
        #[cfg(not(feature = "cuda"))]
        anyhow::bail!("--device cuda: this binary was built without CUDA (cargo build --release --features cuda)");
    }
    let ck = crate::run::open_checkpoint(&dir)?;
    let model = Qwen35::load(
        &ck,
        CpuBackend::default().with_kv_dtype(args.kv_cache_dtype),
    )?;
    if args.drafts {
        return drafts(model, &dir, &args);
    }
    if args.rounds {
        println!(
            "model: {} ({}), backend {}",
            dir.display(),
            model.format,
            model.backend_name()
        );
        return crate::bench_rounds::bench_rounds(
            &model,
            args.context,
            args.long_prompt,
            args.repeat.max(3),
        );
    }
    let bw = read_bandwidth();
    let vocab = model.config.vocab_size as u32;
    let prompt: Vec<u32> = (0..args.prompt_tokens as u32)
        .map(|i| (i * 7919 + 13) % vocab.min(240_000))
        .collect();
    let req = GenerateRequest {
        prompt,
        max_tokens: args.decode_tokens + 1,
        sampling: SamplingParams::greedy(),
        penalties: tensorfold_engine::Penalties::default(),
        stop_ids: Vec::new(),
        ignore_eos: true,
        prefill_chunk: 512,
        want_prompt_logits: false,
    };
    let (mut best_prefill, mut best_decode, mut shas) = (0.0f64, 0.0f64, Vec::new());
    for _ in 0..args.repeat.max(1) {
        let out = generate(&model, &req, |_| true)?;
        best_prefill = best_prefill.max(args.prompt_tokens as f64 / out.prompt_secs);
        best_decode = best_decode.max((out.tokens.len() - 1) as f64 / out.decode_secs);
        shas.push(token_sha(&out.tokens));
    }
    let bytes = model.weight_bytes_per_row as f64;
    let bound = bw / bytes;
    println!(
        "model: {} ({}), backend {}",
        dir.display(),
        model.format,
        model.backend_name()
    );
    println!(
        "read bandwidth: {:.1} GB/s; weights read per decode row: {:.3} GB",
        bw / 1e9,
        bytes / 1e9
    );
    println!(
        "| prefill tok/s ({} tok) | decode tok/s | bandwidth bound tok/s | decode / bound | token_sha (each repeat) |",
        args.prompt_tokens
    );
    println!("|---|---|---|---|---|");
    println!(
        "| {:.1} | {:.2} | {:.2} | {:.0}% | {} |",
        best_prefill,
        best_decode,
        bound,
        100.0 * best_decode / bound,
        shas.join(" ")
    );
    Ok(())
}

/// `--drafts`: drafted against plain decoding on whichever backend holds the model.
fn drafts<B: tensorfold_backend::Backend>(
    model: Qwen35<B>,
    dir: &std::path::Path,
    args: &BenchArgs,
) -> Result<()> {
    if !args.files.is_empty() {
        return crate::bench_drafts::bench_files(
            model,
            dir,
            crate::bench_drafts::FilesBench {
                files: &args.files,
                decode_tokens: args.decode_tokens,
                rewrite_tokens: args.rewrite_tokens,
                prefix_tokens: args.prefix_tokens,
                drafters: args.drafters,
                fixed_widths: args.fixed_widths,
            },
        );
    }
    crate::bench_drafts::bench_drafts(
        model,
        dir,
        args.decode_tokens,
        args.rewrite_tokens,
        args.repeat,
        args.drafters,
    )
}
