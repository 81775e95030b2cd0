//! `tensorfold serve`: loads a checkpoint, starts the engine thread and the OpenAI-compatible HTTP server, and on
//! SIGINT/SIGTERM stops accepting, finishes in-flight replies and shuts the engine down.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_engine::EngineConfig;
use tensorfold_model::Qwen35;
use tensorfold_server::{AppState, ModelAssets, ServerOptions};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Checkpoint directory (default: the built-in model).
    #[arg(long, env = "TENSORFOLD_MODEL")]
    pub model: Option<PathBuf>,
    /// Address to listen on (loopback by default; use 0.0.0.0 to serve other machines).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0 picks a free one; the address is printed on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Streams that share rounds (default: 4 on the CPU, 16 with --device cuda).
    #[arg(long)]
    pub parallel: Option<usize>,
    /// Longest prompt + reply in tokens (default: the model's max_position_embeddings, at most 32768).
    #[arg(long)]
    pub context: Option<usize>,
    /// Requests waiting beyond --parallel before new ones get 429.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Prompt-cache budget in GiB (0 = off; default 1 on the CPU). With --device cuda the snapshots are kept in
    /// device memory, and the default is a tenth of the memory left for the KV cache: a 1,024-token snapshot of
    /// the 27B shape takes about 0.27 GiB, so 1 GiB held only three prompts.
    #[arg(long)]
    pub prompt_cache_gib: Option<f64>,
    /// Accepted API key (repeatable); without any, no authentication.
    #[arg(long = "api-key", env = "TENSORFOLD_API_KEY", value_delimiter = ',')]
    pub api_keys: Vec<String>,
    /// Largest reply a request may ask for, and the default (default: whatever the context leaves).
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// Serve every request without drafts.
    #[arg(long)]
    pub no_drafts: bool,
    /// Prompt rows one round takes from the streams still prefilling (vLLM's --max-num-batched-tokens, SGLang's
    /// --chunked-prefill-size); a chunk also ends at each prompt-cache snapshot (every 1,024 tokens). Larger chunks
    /// take fewer rounds for a long prompt and hold the other streams' rounds longer (default: 256 on the CPU, 2,048
    /// with --device cuda, where 16 streams of 1,024-token prompts got their first token sooner and their replies
    /// faster than at 256: BENCHMARKS.md §7, call 132).
    #[arg(long)]
    pub prefill_chunk: Option<usize>,
    /// Model id reported by /v1/models and in responses (default: the checkpoint directory's name).
    #[arg(long)]
    pub name: Option<String>,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Request body limit in MiB (larger bodies get 413).
    #[arg(long, default_value_t = 8)]
    pub max_body_mib: usize,
    /// Where to run the model (cuda needs a binary built with `--features cuda` and an NVIDIA GPU).
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: crate::check::Device,
    /// With --device cuda: the share of the GPU's memory to use in all; the KV cache gets what the weights, a
    /// round of --prefill-chunk rows, the streams' states and the prompt cache leave of it (as vLLM's flag).
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// With --device cuda: a KV cache of this many GiB instead of what --gpu-memory-utilization leaves.
    #[arg(long)]
    pub kv_cache_gib: Option<f64>,
    /// How the KV cache stores keys and values: f32 (closest to the float64 reference), or bf16 (twice the tokens
    /// in the same memory; on the GPU up to 4% slower at short contexts, within 1% at long ones; every equality
    /// still holds; see README).
    #[arg(long, default_value = "f32")]
    pub kv_cache_dtype: tensorfold_backend::KvDtype,
}

pub fn serve(args: ServeArgs) -> Result<()> {
    crate::run::init_threads(args.threads);
    let (parallel, prefill_chunk) = match args.device {
        crate::check::Device::Cpu => (4, EngineConfig::default().prefill_chunk),
        crate::check::Device::Cuda => (16, 2048),
    };
    let parallel = args.parallel.unwrap_or(parallel);
    let prefill_chunk = args.prefill_chunk.unwrap_or(prefill_chunk);
    if parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    if prefill_chunk == 0 {
        bail!("--prefill-chunk must be at least 1");
    }
    if args
        .prompt_cache_gib
        .is_some_and(|g| !(g.is_finite() && g >= 0.0))
    {
        bail!("--prompt-cache-gib must be a non-negative number");
    }
    if !(args.gpu_memory_utilization > 0.0 && args.gpu_memory_utilization <= 1.0) {
        bail!("--gpu-memory-utilization must be above 0 and at most 1");
    }
    if args
        .kv_cache_gib
        .is_some_and(|g| !(g.is_finite() && g > 0.0))
    {
        bail!("--kv-cache-gib must be a positive number");
    }
    let dir = args.model.clone().unwrap_or_else(crate::default_model_dir);
    let ck = crate::run::open_checkpoint(&dir)?;
    let assets = ModelAssets::from_dir(&dir, &ck.config)?;
    let max_context = ck.config.max_position_embeddings.clamp(1, 32768);
    let context = args.context.unwrap_or(max_context);
    if context < 2 {
        bail!("--context must be at least 2 tokens");
    }
    let name = args.name.clone().unwrap_or_else(|| {
        dir.canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "tensorfold".into())
    });
    let config = EngineConfig {
        parallel,
        context,
        max_queue: args.queue,
        prefill_chunk,
        prompt_cache_bytes: gib_bytes(args.prompt_cache_gib.unwrap_or(1.0)),
        drafts: !args.no_drafts,
        ..EngineConfig::default()
    };
    let engine = match args.device {
        crate::check::Device::Cpu => {
            let be = CpuBackend::default().with_kv_dtype(args.kv_cache_dtype);
            tensorfold_engine::spawn(Qwen35::load(&ck, be)?, config)
        }
        #[cfg(feature = "cuda")]
        crate::check::Device::Cuda => {
            let memory = crate::cuda_serve::ServeMemory {
                utilization: args.gpu_memory_utilization,
                kv_bytes: args.kv_cache_gib.map(gib_bytes),
                parallel: config.parallel,
                prefill_chunk: config.prefill_chunk,
                prompt_cache_bytes: args.prompt_cache_gib.map(gib_bytes),
                context,
                kv_dtype: args.kv_cache_dtype,
            };
            let (model, prompt_cache_bytes) = crate::cuda_serve::load(&ck, &memory)?;
            let config = EngineConfig {
                prompt_cache_bytes,
                ..config
            };
            tensorfold_engine::spawn(model, config)
        }
        #[cfg(not(feature = "cuda"))]
        crate::check::Device::Cuda => bail!(
            "--device cuda: this binary was built without CUDA (cargo build --release --features cuda)"
        ),
    };
    let options = ServerOptions {
        model_name: name.clone(),
        api_keys: args
            .api_keys
            .iter()
            .filter(|k| !k.is_empty())
            .cloned()
            .collect(),
        max_tokens: args.max_tokens,
        max_body_bytes: args.max_body_mib.max(1) << 20,
    };
    let state = AppState::new(engine.clone(), assets, options);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("tensorfold-http")
        .build()
        .context("starting the async runtime")?;
    let addr = format!("{}:{}", args.host, args.port);
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let local = listener.local_addr().context("reading the bound address")?;
        eprintln!(
            "tensorfold: serving {name} on http://{local} (context {context}, {parallel} parallel streams, prompt \
             chunks of {prefill_chunk} rows)"
        );
        let shutdown = async {
            tensorfold_server::shutdown_signal().await;
            eprintln!("tensorfold: shutting down: finishing in-flight requests (signal again to exit now)");
            tokio::spawn(async {
                tensorfold_server::shutdown_signal().await;
                eprintln!("tensorfold: second signal: exiting without waiting");
                std::process::exit(130);
            });
        };
        tensorfold_server::serve(listener, state, shutdown)
            .await
            .context("serving HTTP")
    });
    engine.shutdown();
    eprintln!("tensorfold: stopped");
    served
}

fn gib_bytes(gib: f64) -> usize {
    (gib * (1u64 << 30) as f64) as usize
}
