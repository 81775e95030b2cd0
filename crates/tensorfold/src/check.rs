//! `tensorfold check`: runs the equality suite (drafted, concurrent, resumed, chunked vs plain) on a checkpoint
//! and prints a receipt, one line per case with both token_shas; exits non-zero on any difference.

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use tensorfold_backend::cpu::CpuBackend;
use tensorfold_backend::KvDtype;
use tensorfold_core::Checkpoint;
use tensorfold_engine::check::{equality_suite, CaseResult};
use tensorfold_model::Qwen35;

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq)]
pub enum Device {
    Cpu,
    Cuda,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[arg(long, env = "TENSORFOLD_MODEL")]
    pub model: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: Device,
    /// A shorter sweep (fewer tokens per reply, fewer chunk sizes).
    #[arg(long)]
    pub quick: bool,
    #[arg(long)]
    pub threads: Option<usize>,
    /// With --device cuda: run the backend-ops test (every op vs its CPU twin, row invariance) first.
    #[arg(long)]
    pub ops: bool,
    /// With --device cuda: run the backend-ops test alone (no oracle, no equality suite), e.g. on the CPU emulator
    /// with `TENSORFOLD_CUDA_OPS` naming the groups.
    #[arg(long)]
    pub ops_only: bool,
    /// How the KV cache stores keys and values: f32 (closest to the float64 reference), or bf16 (twice the tokens
    /// in the same memory; on the GPU up to 4% slower at short contexts, within 1% at long ones; every equality
    /// still holds; see README).
    #[arg(long, default_value = "f32")]
    pub kv_cache_dtype: KvDtype,
}

pub fn check(args: CheckArgs) -> Result<()> {
    crate::run::init_threads(args.threads);
    let dir = args.model.clone().unwrap_or_else(crate::default_model_dir);
    if args.device == Device::Cuda {
        #[cfg(feature = "cuda")]
        return crate::cuda::check(
            &dir,
            args.quick,
            args.ops,
            args.ops_only,
            args.kv_cache_dtype,
        );
        #[cfg(not(feature = "cuda"))]
        bail!("--device cuda: this binary was built without CUDA (cargo build --release --features cuda)");
    }
    let kv = args.kv_cache_dtype;
    let load = || {
        Qwen35::load(
            &Checkpoint::open(&dir, |_, _| {})?,
            CpuBackend::default().with_kv_dtype(kv),
        )
    };
    let results = equality_suite(&load, args.quick)?;
    let failed = print_receipt(&results, &dir, "cpu");
    if failed > 0 {
        bail!(
            "{failed} of {} cases differ from the plain reply",
            results.len()
        );
    }
    Ok(())
}

/// Prints one line per case with both token_shas and a summary line; returns the number of differing cases.
pub fn print_receipt(results: &[CaseResult], dir: &std::path::Path, device: &str) -> usize {
    let width = results.iter().map(|r| r.name.len()).max().unwrap_or(0);
    for r in results {
        let verdict = if r.pass() { "ok  " } else { "DIFF" };
        println!(
            "{verdict} {:width$}  plain {}  got {}  {}",
            r.name, r.reference_sha, r.got_sha, r.note
        );
    }
    let failed = results.iter().filter(|r| !r.pass()).count();
    println!(
        "{} cases, {} equal, {} different ({}, {device})",
        results.len(),
        results.len() - failed,
        failed,
        dir.display()
    );
    failed
}
