//! The `tensorfold` binary: parses the command line and turns every failure into one clear `error:` line and a
//! non-zero exit (never a panic).

mod bench;
mod bench_concurrent;
mod bench_drafts;
#[cfg(feature = "cuda")]
mod bench_mtp;
mod bench_rounds;
mod check;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod cuda_serve;
mod run;
mod serve;
mod synth;
mod synth_tokenizer;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "tensorfold",
    version,
    about = "Exact speculative decoding for Qwen3.5 hybrid models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate from a prompt and stream the text to stdout.
    Run(run::RunArgs),
    /// Write a random-weight checkpoint of a published Qwen3.5 shape (for benchmarks).
    Synth(synth::SynthArgs),
    /// Measure prefill and decode speed against this machine's memory bandwidth (or `bench concurrent`).
    Bench(BenchCli),
    /// Run the equality suite (drafted, concurrent, resumed, chunked == plain) and print a receipt.
    Check(check::CheckArgs),
    /// Serve the OpenAI-compatible HTTP API (completions, chat, streaming, tools).
    Serve(serve::ServeArgs),
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchCli {
    #[command(subcommand)]
    mode: Option<BenchMode>,
    #[command(flatten)]
    args: bench::BenchArgs,
}

#[derive(Subcommand)]
enum BenchMode {
    /// Load a running server with 1, 2, 4, 8… concurrent streams and check every reply against the same request
    /// alone and with `"draft": false`.
    Concurrent(bench_concurrent::ConcurrentArgs),
}

/// The checkpoint used when no `--model` is given: `TENSORFOLD_MODEL`, else the built-in model shipped in the
/// repository (`models/tensorfold-coder-tiny`).
pub fn default_model_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("TENSORFOLD_MODEL") {
        return PathBuf::from(dir);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/tensorfold-coder-tiny")
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Synth(args) => synth::synth(args),
        Command::Bench(BenchCli {
            mode: Some(BenchMode::Concurrent(args)),
            ..
        }) => bench_concurrent::run(args),
        Command::Bench(BenchCli { mode: None, args }) => bench::bench(args),
        Command::Check(args) => check::check(args),
        Command::Serve(args) => serve::serve(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
