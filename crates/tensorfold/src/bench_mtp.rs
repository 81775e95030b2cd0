//! The MTP head's chained draft step at a checkpoint's real size, two ways: the head's forward of the chain's
//! newest row with its logits brought to the host, then the host's draw and probability over the whole vocabulary
//! (the engine's way before call 140); and the head's forward with its logits left on the backend, then
//! `next_drafts`, which draws there and reads back a token and a few ranks (the engine's way now).

use anyhow::Result;
use std::time::{Duration, Instant};
use tensorfold_backend::{Backend, RowRef};
use tensorfold_core::sampling::SamplingParams;
use tensorfold_engine::drafters::{draft_draw, next_drafts};
use tensorfold_model::Qwen35;

fn median_ms(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

/// One table line, or None when the checkpoint has no MTP head. The head first absorbs 64 rows of context (a
/// stream's recent rows); each step then runs one pending chain row at the next position, as a chain's first
/// draft does, greedy and at temperature 0.8.
pub fn mtp_step_line<B: Backend>(m: &Qwen35<B>) -> Result<Option<String>> {
    let Some(head) = m.mtp.as_ref() else {
        return Ok(None);
    };
    let (h, vocab) = (m.config.hidden_size, m.config.vocab_size);
    let ctx = 64;
    let mut slot = head.new_slot(&m.backend);
    let rows: Vec<RowRef> = (0..ctx).map(|i| RowRef::chain(0, 0, 0, i)).collect();
    let tokens: Vec<u32> = (0..ctx).map(|i| ((i * 7919 + 13) % vocab) as u32).collect();
    // Any small taps do: the cost does not depend on their values.
    let taps: Vec<f32> = (0..ctx * h)
        .map(|i| ((i % 97) as f32 - 48.0) * 1e-3)
        .collect();
    head.forward(m, &rows, &tokens, &taps, &mut [&mut slot], &[])?;
    let all: Vec<usize> = (0..ctx).collect();
    head.keep(&m.backend, &mut slot, &all, 0)?;
    // The engine's threshold, so the backend reads as many ranks as a chain's step does.
    let min_prob = tensorfold_engine::EngineConfig::default().mtp_min_prob;
    let mut line = String::new();
    for (name, sampling) in [
        ("greedy", SamplingParams::greedy()),
        (
            "T 0.8",
            SamplingParams {
                temperature: 0.8,
                seed: 7,
                ..SamplingParams::greedy()
            },
        ),
    ] {
        let (mut forward, mut host, mut backend) = (Vec::new(), Vec::new(), Vec::new());
        let row = [RowRef {
            slot: 0,
            pos: ctx,
            parent: None,
        }];
        // One step of the head on the chain's newest row, its logits left on the backend.
        let mut step = |i: usize| {
            head.forward_logits(
                m,
                &row,
                &[tokens[i % ctx]],
                &taps[..h],
                &mut [&mut slot],
                &[0],
            )
        };
        for i in 0..9 {
            let t = Instant::now();
            let (logits, out) = step(i)?;
            let d = next_drafts(m, &logits, &[(&sampling, ctx as u64 + 1, min_prob)]);
            backend.push(t.elapsed());
            std::hint::black_box((d, out));
        }
        for i in 0..9 {
            let t = Instant::now();
            // `Mtp::forward`'s way: the logits brought to the host whole.
            let logits = step(i)?.0.into_host();
            forward.push(t.elapsed());
            let t = Instant::now();
            let (y, p) = draft_draw(&logits, &sampling, ctx as u64 + 1);
            host.push(t.elapsed());
            std::hint::black_box((y, p));
        }
        line.push_str(&format!(
            "| MTP draft step, 1 row, {name} | {:.3} ms the head's forward, logits to the host | {:.3} ms the \
             host's draw and probability | {:.3} ms the whole step drawn on the backend |\n",
            median_ms(forward),
            median_ms(host),
            median_ms(backend)
        ));
    }
    Ok(Some(line.trim_end().to_string()))
}
