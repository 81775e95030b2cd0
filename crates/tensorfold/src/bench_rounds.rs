//! `tensorfold bench --rounds`: what a round costs as it widens (rows of one stream's window, single rows of
//! several streams), relative to a one-row round, and a prompt-cache resume against a cold prefill.

use anyhow::Result;
use std::time::Instant;
use tensorfold_backend::{Backend, RowRef};
use tensorfold_model::{Qwen35, SlotState};

fn prefill<B: Backend>(m: &Qwen35<B>, prompt: &[u32], chunk: usize) -> Result<SlotState<B>> {
    let mut slot = m.new_slot();
    for (c, piece) in prompt.chunks(chunk).enumerate() {
        let rows: Vec<RowRef> = (0..piece.len())
            .map(|i| RowRef::chain(0, c * chunk, 0, i))
            .collect();
        m.forward_chains(&rows, piece, &mut [&mut slot], &[])?;
    }
    Ok(slot)
}

/// Median seconds of `reps` calls of `f`.
fn median(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let s = Instant::now();
        f()?;
        t.push(s.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

pub fn bench_rounds<B: Backend>(
    m: &Qwen35<B>,
    context: usize,
    long_prompt: usize,
    reps: usize,
) -> Result<()> {
    let vocab = m.config.vocab_size as u32;
    let ids = |n: usize, salt: u32| -> Vec<u32> {
        (0..n as u32)
            .map(|i| (i * 7919 + salt * 131 + 13) % vocab)
            .collect()
    };
    // 1. One stream, a chain window of R rows after `context` committed tokens (forward only, nothing kept).
    let mut slot = prefill(m, &ids(context, 0), 256)?;
    println!("| rows in one stream's window | round ms | relative to 1 row |");
    println!("|---|---|---|");
    let mut one = 0.0;
    for r in [1usize, 4, 8, 16, 32] {
        let rows: Vec<RowRef> = (0..r).map(|i| RowRef::chain(0, context, 0, i)).collect();
        let toks = ids(r, 9);
        let all: Vec<usize> = (0..r).collect();
        let t = median(reps, || {
            Ok(m.forward(&rows, &toks, &mut [&mut slot], &all)
                .map(|_| ())?)
        })?;
        if r == 1 {
            one = t;
        }
        println!("| {r} | {:.1} | {:.2}× |", t * 1e3, t / one);
    }
    // 2. N streams, one decode row each.
    let mut slots: Vec<SlotState<B>> = (0..8)
        .map(|s| prefill(m, &ids(context, s + 1), 256))
        .collect::<Result<_>>()?;
    println!();
    println!("| streams (one row each) | round ms | relative to 1 stream |");
    println!("|---|---|---|");
    for n in [1usize, 2, 4, 8] {
        let rows: Vec<RowRef> = (0..n)
            .map(|s| RowRef {
                slot: s,
                pos: context,
                parent: None,
            })
            .collect();
        let toks = ids(n, 5);
        let all: Vec<usize> = (0..n).collect();
        let t = median(reps, || {
            let mut refs: Vec<&mut SlotState<B>> = slots.iter_mut().take(n).collect();
            Ok(m.forward(&rows, &toks, &mut refs, &all).map(|_| ())?)
        })?;
        println!("| {n} | {:.1} | {:.2}× |", t * 1e3, t / one);
    }
    // 3. Prompt cache: resume a long prompt from its snapshot vs prefill it cold.
    let long = ids(long_prompt, 77);
    let cold = median(2, || prefill(m, &long, 256).map(|_| ()))?;
    let cached = prefill(m, &long[..long_prompt - 1], 256)?;
    let snap = m.snapshot(&cached);
    let resume = median(reps, || {
        let mut s = m.restore(&snap)?;
        let last = long_prompt - 1;
        m.forward_chains(
            &[RowRef::chain(0, last, 0, 0)],
            &long[last..],
            &mut [&mut s],
            &[0],
        )?;
        Ok(())
    })?;
    println!();
    println!("| {long_prompt}-token prompt | ms | relative to cold |");
    println!("|---|---|---|");
    println!("| cold prefill | {:.0} | 1.00× |", cold * 1e3);
    println!(
        "| prompt-cache hit (restore {:.1} MB snapshot + 1 row) | {:.0} | {:.3}× |",
        m.snapshot_bytes(&snap) as f64 / 1e6,
        resume * 1e3,
        resume / cold
    );
    Ok(())
}
