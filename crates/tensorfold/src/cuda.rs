//! `--device cuda` for `check` and `bench` (built with `--features cuda`): the backend-ops test, the float64
//! oracle and the equality suite on the GPU, and the GPU benchmark sweep against the measured copy bandwidth.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Instant;
use tensorfold_backend::{Backend, KvDtype, RowRef};
use tensorfold_core::sampling::{argmax, token_sha, KeyedRule, RowDraw, SamplingParams};
use tensorfold_core::Checkpoint;
use tensorfold_cuda::CudaBackend;
use tensorfold_engine::check::equality_suite;
use tensorfold_engine::{generate, GenerateRequest};
use tensorfold_model::{Qwen35, SlotState};

fn backend(kv: KvDtype) -> Result<CudaBackend> {
    let be = CudaBackend::new(0)
        .context("--device cuda")?
        .with_kv_dtype(kv);
    eprintln!(
        "cuda: {}; keys and values stored as {}",
        be.info(),
        kv.name()
    );
    Ok(be)
}

/// The checkpoint on the GPU, weights uploaded in their stored format (for `run` and `serve`).
pub fn load(ck: &Checkpoint, kv: KvDtype) -> Result<Qwen35<CudaBackend>> {
    let be = backend(kv)?;
    let t = Instant::now();
    let m = Qwen35::load(ck, be.clone())?;
    be.synchronize();
    eprintln!(
        "cuda: weights uploaded in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    Ok(m)
}

/// `tensorfold check --device cuda`: ops test (with `--ops` or `--ops-only`), float64 oracle (when the checkpoint
/// has a reference), then the equality suite (neither with `--ops-only`); non-zero exit on any failure.
pub fn check(dir: &Path, quick: bool, ops: bool, ops_only: bool, kv: KvDtype) -> Result<()> {
    let be = backend(kv)?;
    let mut failed = Vec::new();
    if ops || ops_only {
        let t = Instant::now();
        let rep = tensorfold_cuda::selftest::run(&be);
        for l in &rep.lines {
            println!("{l}");
        }
        println!(
            "backend-ops: {} checks, {} failed ({:.1}s)",
            rep.lines.len() - 1,
            rep.failures.len(),
            t.elapsed().as_secs_f64()
        );
        if !rep.failures.is_empty() {
            failed.push(format!("{} backend-ops checks", rep.failures.len()));
        }
    }
    if ops_only {
        if !failed.is_empty() {
            bail!("cuda check failed: {}", failed.join(", "));
        }
        return Ok(());
    }
    if dir.join("reference.safetensors").is_file() {
        let model = Qwen35::load(&Checkpoint::open(dir, |_, _| {})?, be.clone())?;
        let o = oracle(&model, dir)?;
        let tol = kv.oracle_tolerance();
        println!(
            "oracle {}: max |logit - float64| {:.2e} (tol {tol:e}), greedy equal {} of {} before the first near-tie",
            dir.display(),
            o.0,
            o.1,
            o.2
        );
        if o.0 > tol || o.1 < o.2 {
            failed.push("oracle".into());
        }
    }
    let load = || Qwen35::load(&Checkpoint::open(dir, |_, _| {})?, be.clone());
    let results = equality_suite(&load, quick)?;
    let diff = crate::check::print_receipt(&results, dir, "cuda");
    if diff > 0 {
        failed.push(format!("{diff} equality cases"));
    }
    if !failed.is_empty() {
        bail!("cuda check failed: {}", failed.join(", "));
    }
    Ok(())
}

/// Teacher-forced logits against the float64 reference, and greedy tokens up to its first near-tie:
/// (max abs diff, equal greedy tokens, comparable tokens).
fn oracle<B: Backend>(model: &Qwen35<B>, dir: &Path) -> Result<(f64, usize, usize)> {
    let path = dir.join("reference.safetensors");
    let bytes = std::fs::read(&path).with_context(|| path.display().to_string())?;
    let st = safetensors::SafeTensors::deserialize(&bytes).context("reference.safetensors")?;
    let words = |n: &str| -> Result<Vec<[u8; 8]>> {
        let t = st
            .tensor(n)
            .with_context(|| format!("reference tensor {n}"))?;
        Ok(t.data()
            .chunks_exact(8)
            .map(|c| c.try_into().unwrap_or([0; 8]))
            .collect())
    };
    let prompt: Vec<u32> = words("prompt_ids")?
        .iter()
        .map(|w| i64::from_le_bytes(*w) as u32)
        .collect();
    let want: Vec<f64> = words("logits")?
        .iter()
        .map(|w| f64::from_le_bytes(*w))
        .collect();
    let greedy: Vec<u32> = words("greedy_ids")?
        .iter()
        .map(|w| i64::from_le_bytes(*w) as u32)
        .collect();
    let margins: Vec<f64> = words("greedy_margins")?
        .iter()
        .map(|w| f64::from_le_bytes(*w))
        .collect();
    let vocab = model.config.vocab_size;
    let mut slot = model.new_slot();
    let rows: Vec<RowRef> = (0..prompt.len())
        .map(|p| RowRef::chain(0, 0, 0, p))
        .collect();
    let all: Vec<usize> = (0..prompt.len()).collect();
    let logits = model.forward_chains(&rows, &prompt, &mut [&mut slot], &all)?;
    if logits.len() != want.len() {
        bail!("{} logits, reference has {}", logits.len(), want.len());
    }
    let max_diff = logits
        .iter()
        .zip(&want)
        .map(|(&a, &b)| (a as f64 - b).abs())
        .fold(0.0, f64::max);
    let comparable = margins
        .iter()
        .position(|&m| m < 1e-3)
        .unwrap_or(greedy.len());
    let mut last = logits[logits.len() - vocab..].to_vec();
    let mut equal = 0;
    for (i, &w) in greedy.iter().enumerate().take(comparable) {
        let got = argmax(&last);
        if got != w {
            break;
        }
        equal += 1;
        let pos = prompt.len() + i;
        last = model.forward_chains(
            &[RowRef::chain(0, pos, 0, 0)],
            &[got],
            &mut [&mut slot],
            &[0],
        )?;
    }
    Ok((max_diff, equal, comparable))
}

fn ids(vocab: usize, n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(7919) + salt * 131 + 13) % (vocab as u32).min(240_000))
        .collect()
}

fn prefill(
    m: &Qwen35<CudaBackend>,
    prompt: &[u32],
    chunk: usize,
) -> Result<SlotState<CudaBackend>> {
    let mut slot = m.new_slot();
    for (c, piece) in prompt.chunks(chunk).enumerate() {
        let rows: Vec<RowRef> = (0..piece.len())
            .map(|i| RowRef::chain(0, c * chunk, 0, i))
            .collect();
        m.forward_chains(&rows, piece, &mut [&mut slot], &[])?;
    }
    Ok(slot)
}

/// The best decode rate of `repeat` runs of `req` (tokens after the first per decode second), and each run's sha.
fn best_decode(
    m: &Qwen35<CudaBackend>,
    req: &GenerateRequest,
    repeat: usize,
) -> Result<(f64, Vec<String>)> {
    let (mut best, mut shas) = (0.0f64, Vec::new());
    for _ in 0..repeat.max(1) {
        let out = generate(m, req, |_| true)?;
        best = best.max((out.tokens.len() - 1) as f64 / out.decode_secs);
        shas.push(token_sha(&out.tokens));
    }
    Ok((best, shas))
}

/// Greedy draws of rows 0..n at position `pos` on.
fn greedy_draws(n: usize, pos: usize) -> Vec<RowDraw> {
    (0..n)
        .map(|row| RowDraw {
            row,
            rule: KeyedRule::Greedy,
            position: (pos + row) as u64,
        })
        .collect()
}

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// `tensorfold bench --device cuda`: copy bandwidth, one-stream greedy decode vs the bandwidth bound, round cost
/// by rows, aggregate decode by streams, prefill by prompt length in forwards of `prefill_chunk` rows (each line
/// printed as soon as measured). `quick`: decode, rounds of 1 and 16 rows and prefill only (no streams, no decode
/// at the prompts' context); `round_rows`, when not empty, the rows of the rounds measured.
pub fn bench(dir: &Path, args: &crate::bench::BenchArgs) -> Result<()> {
    let (decode_tokens, prefill_lens, prefill_chunk) = (
        args.decode_tokens,
        &args.prefill_lens[..],
        args.prefill_chunk.max(1),
    );
    let (repeat, quick, round_rows, kv) = (
        args.repeat,
        args.quick,
        &args.round_rows[..],
        args.kv_cache_dtype,
    );
    let be = backend(kv)?;
    let bw = be.copy_bandwidth(1 << 30);
    let t = Instant::now();
    let ck = crate::run::open_checkpoint(dir)?;
    let m = Qwen35::load(&ck, be.clone())?;
    be.synchronize();
    let bytes = m.weight_bytes_per_row as f64;
    println!(
        "model: {} ({}), loaded in {:.1}s",
        dir.display(),
        m.format,
        t.elapsed().as_secs_f64()
    );
    println!(
        "device-to-device copy: {:.0} GB/s (read + write); weights read per decode row {:.2} GB; bound {:.1} tok/s",
        bw / 1e9,
        bytes / 1e9,
        bw / bytes
    );
    if args.at_context {
        return prefill_lines(&be, &m, prefill_lens, prefill_chunk, false);
    }
    let vocab = m.config.vocab_size;
    let req = GenerateRequest {
        prompt: ids(vocab, 64, 1),
        max_tokens: decode_tokens + 1,
        sampling: SamplingParams::greedy(),
        penalties: Default::default(),
        stop_ids: Vec::new(),
        ignore_eos: true,
        prefill_chunk: 64,
        want_prompt_logits: false,
    };
    let (best, shas) = best_decode(&m, &req, repeat)?;
    println!(
        "| decode, 1 stream | {best:.1} tok/s | bound {:.1} tok/s | {:.0}% of bound | token_sha {} |",
        bw / bytes,
        100.0 * best * bytes / bw,
        shas.join(" ")
    );
    if let Some(g) = be.graph_stats() {
        println!(
            "graphs so far: {} segments sent as graphs, {} plainly, {} graphs built, {} node updates",
            g.graph_sends, g.plain_sends, g.builds, g.node_updates
        );
    }
    // The same with sampling (temperature 0.8, keyed Gumbel over the whole vocabulary): drawn on the device, or
    // on the host with TENSORFOLD_HOST_DRAWS=1.
    let sampled = GenerateRequest {
        sampling: SamplingParams {
            temperature: 0.8,
            seed: 7,
            ..SamplingParams::greedy()
        },
        ..req.clone()
    };
    let (best, shas) = best_decode(&m, &sampled, repeat)?;
    println!(
        "| decode, 1 stream, temperature 0.8 | {best:.1} tok/s | token_sha {} |",
        shas.join(" ")
    );
    // Qwen's recommended sampling (temperature 0.7, top-k 20, top-p 0.8): the device gives each row's best
    // ranks and softmax total, the host walks the cut.
    let cut = GenerateRequest {
        sampling: SamplingParams {
            temperature: 0.7,
            top_k: 20,
            top_p: 0.8,
            seed: 7,
            ..SamplingParams::greedy()
        },
        ..req.clone()
    };
    let (best, shas) = best_decode(&m, &cut, repeat)?;
    println!(
        "| decode, 1 stream, temperature 0.7 top-k 20 top-p 0.8 | {best:.1} tok/s | token_sha {} |",
        shas.join(" ")
    );
    // The same under penalties (presence 1.5, repetition 1.1): applied to a copy of the row on the device.
    let penalised = GenerateRequest {
        penalties: tensorfold_engine::Penalties {
            presence: 1.5,
            frequency: 0.0,
            repetition: 1.1,
        },
        ..cut.clone()
    };
    let (best, shas) = best_decode(&m, &penalised, repeat)?;
    println!(
        "| decode, 1 stream, the same with presence 1.5, repetition 1.1 | {best:.1} tok/s | token_sha {} |",
        shas.join(" ")
    );
    if let Some(line) = crate::bench_mtp::mtp_step_line(&m)? {
        println!("{line}");
    }
    if be.profile_report().is_some() {
        // Where one-stream decode time goes (TENSORFOLD_CUDA_PROFILE=1): 8 tokens after the prompt.
        let mut slot = prefill(&m, &ids(vocab, 64, 3), 64)?;
        be.profile_reset();
        for step in 0..8 {
            m.forward_chains_round(
                &[RowRef::chain(0, 64 + step, 0, 0)],
                &[7],
                &mut [&mut slot],
                &[0],
            )?
            .draws(&greedy_draws(1, 65 + step), &[]);
        }
        if let Some(r) = be.profile_report() {
            println!("profile of 8 decode rounds:\n{r}");
        }
        // And of draws alone from one round's logits: 8 cut (top-k 20, top-p 0.8) and 8 penalised ones.
        let mut other = prefill(&m, &ids(vocab, 64, 3), 64)?;
        let logits =
            m.forward_chains_round(&[RowRef::chain(0, 64, 0, 0)], &[7], &mut [&mut other], &[0])?;
        let rule = cut.sampling.keyed_rule(vocab);
        let edits = tensorfold_engine::penalties::penalty_edits(
            0,
            &penalised.penalties,
            &ids(vocab, 64, 3),
            &[5, 6, 7],
            vocab,
        );
        be.synchronize();
        be.profile_reset();
        for step in 0..8 {
            let d = [RowDraw {
                row: 0,
                rule,
                position: 73 + step,
            }];
            logits.draws(&d, &[]);
            logits.draws(&d, &edits);
        }
        if let Some(r) = be.profile_report() {
            println!("profile of 8 cut draws and 8 penalised ones:\n{r}");
        }
        // And of a drafted window's round: 16 rows of one stream, or the most of `round_rows` up to 64 (forward
        // only, as timed below).
        be.profile_reset();
        let n = round_rows
            .iter()
            .copied()
            .filter(|&r| r <= 64)
            .max()
            .unwrap_or(16);
        let rows: Vec<RowRef> = (0..n).map(|i| RowRef::chain(0, 72, 0, i)).collect();
        let all: Vec<usize> = (0..n).collect();
        for _ in 0..4 {
            m.forward(&rows, &ids(vocab, n, 9), &mut [&mut slot], &all)?;
        }
        if let Some(r) = be.profile_report() {
            println!("profile of 4 rounds of {n} rows:\n{r}");
        }
        // And of one prompt chunk of 2048 rows.
        be.profile_reset();
        prefill(&m, &ids(vocab, 2048, 4), 2048)?;
        if let Some(r) = be.profile_report() {
            println!("profile of a 2048-row prompt chunk:\n{r}");
        }
        be.profile_reset();
    }
    // Round cost by rows of one stream's window after 64 committed tokens: the forward and a greedy draw of every
    // row (what verifying a window needs).
    let mut slot = prefill(&m, &ids(vocab, 64, 2), 64)?;
    let mut one = 0.0;
    let widths: &[usize] = if !round_rows.is_empty() {
        round_rows
    } else if quick {
        &[1, 16]
    } else {
        &[1, 2, 4, 8, 16, 32, 64]
    };
    for &r in widths {
        let rows: Vec<RowRef> = (0..r).map(|i| RowRef::chain(0, 64, 0, i)).collect();
        let toks = ids(vocab, r, 9);
        let all: Vec<usize> = (0..r).collect();
        let (mut times, mut enqueue) = (Vec::new(), Vec::new());
        let launches = be.launches();
        let graphs = be.graph_stats();
        // Median of 9: the first rounds of a shape also capture its CUDA graphs.
        for _ in 0..ROUND_REPEATS {
            let s = Instant::now();
            let (logits, _) = m.forward_round(&rows, &toks, &mut [&mut slot], &all, &[])?;
            // The forward returns once its launches are queued (the logits stay on the device).
            enqueue.push(s.elapsed().as_secs_f64());
            logits.draws(&greedy_draws(r, 64), &[]);
            times.push(s.elapsed().as_secs_f64());
        }
        let t = median(times);
        if r == 1 {
            one = t;
        }
        println!(
            "| round of {r} rows | {:.2} ms | {:.2}x one row | host queues it in {:.2} ms | {} launches |{}",
            t * 1e3,
            t / one,
            median(enqueue) * 1e3,
            (be.launches() - launches) / ROUND_REPEATS,
            graph_line(graphs, be.graph_stats(), ROUND_REPEATS)
        );
    }
    // Aggregate decode (not in a quick run): N streams, one row each per round, drawn greedily and kept.
    let stream_counts: &[usize] = if quick { &[] } else { &[1, 4, 16, 32, 64] };
    for &n in stream_counts {
        let graphs = be.graph_stats();
        let mut slots: Vec<SlotState<CudaBackend>> = (0..n)
            .map(|s| prefill(&m, &ids(vocab, 32, 10 + s as u32), 32))
            .collect::<Result<_>>()?;
        // Three untimed rounds first: a server decodes thousands of rounds of one shape, so one-time costs (CUDA
        // graphs are captured on the second round of a shape) are not what a round costs.
        let (warm, steps) = (3, 8);
        let mut toks = ids(vocab, n, 20);
        let mut s = Instant::now();
        for step in 0..warm + steps {
            if step == warm {
                // The prompts' prefill and the warm rounds are still queued: without this wait, their tail was
                // timed as part of the first round (1 stream measured 81 tok/s where one-stream decode
                // measured 108).
                be.synchronize();
                s = Instant::now();
            }
            let rows: Vec<RowRef> = (0..n)
                .map(|k| RowRef {
                    slot: k,
                    pos: 32 + step,
                    parent: None,
                })
                .collect();
            let all: Vec<usize> = (0..n).collect();
            let mut refs: Vec<&mut SlotState<CudaBackend>> = slots.iter_mut().collect();
            let logits = m.forward_chains_round(&rows, &toks, &mut refs, &all)?;
            toks = logits.draws(&greedy_draws(n, 33 + step), &[]);
        }
        let t = s.elapsed().as_secs_f64();
        println!(
            "| {n} streams | {:.1} tok/s aggregate | {:.2} ms per round |{}",
            (n * steps) as f64 / t,
            t * 1e3 / steps as f64,
            graph_line(graphs, be.graph_stats(), warm + steps)
        );
    }
    prefill_lines(&be, &m, prefill_lens, prefill_chunk, quick)
}

/// Prefill of each of `prefill_lens` in forwards of `prefill_chunk` rows, then (unless `quick`) one-stream decode at
/// that context, with the event profiles of both when TENSORFOLD_CUDA_PROFILE=1.
fn prefill_lines(
    be: &CudaBackend,
    m: &Qwen35<CudaBackend>,
    prefill_lens: &[usize],
    prefill_chunk: usize,
    quick: bool,
) -> Result<()> {
    let vocab = m.config.vocab_size;
    for &len in prefill_lens {
        let prompt = ids(vocab, len, 30);
        be.profile_reset();
        let s = Instant::now();
        let mut slot = prefill(m, &prompt, prefill_chunk)?;
        be.synchronize();
        let t = s.elapsed().as_secs_f64();
        println!(
            "| prefill {len} tokens (chunks of {prefill_chunk}) | {:.0} tok/s | {:.2} s |",
            len as f64 / t,
            t
        );
        if let Some(r) = be.profile_report() {
            println!("profile of the {len}-token prefill:\n{r}");
        }
        if quick {
            continue;
        }
        // One-stream decode with that prompt in context (attention reads every committed key), after three
        // untimed rounds (as for the streams above).
        let (warm, steps) = (3, 8);
        let mut s = Instant::now();
        for step in 0..warm + steps {
            if step == warm {
                be.synchronize();
                be.profile_reset();
                s = Instant::now();
            }
            m.forward_chains_round(
                &[RowRef::chain(0, len + step, 0, 0)],
                &[7],
                &mut [&mut slot],
                &[0],
            )?
            .draws(&greedy_draws(1, len + step + 1), &[]);
        }
        let t = s.elapsed().as_secs_f64();
        println!(
            "| decode at {len} tokens of context | {:.1} tok/s | {:.2} ms per token |",
            steps as f64 / t,
            t * 1e3 / steps as f64
        );
        if let Some(r) = be.profile_report() {
            println!("profile of {steps} decode rounds at {len} tokens of context:\n{r}");
        }
    }
    Ok(())
}

/// Rounds timed per row count (their median is reported).
const ROUND_REPEATS: usize = 9;

/// What the CUDA graphs did over `n` rounds (between two counts), as table cells; empty when graphs are off.
fn graph_line(
    before: Option<tensorfold_cuda::GraphStats>,
    after: Option<tensorfold_cuda::GraphStats>,
    n: usize,
) -> String {
    match (before, after) {
        (Some(b), Some(a)) => format!(
            " graphs: {} sent, {} plain, {} built, {:.1} node updates a round |",
            a.graph_sends - b.graph_sends,
            a.plain_sends - b.plain_sends,
            a.builds - b.builds,
            (a.node_updates - b.node_updates) as f64 / n as f64
        ),
        _ => String::new(),
    }
}
