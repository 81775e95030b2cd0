//! One stream decoded alone: chunked prefill of the prompt, then one row per token from the slot's state, each
//! token drawn with the keyed rule at its absolute position.

use crate::penalties::penalty_edits;
use std::time::Instant;
use tensorfold_backend::{Backend, RowRef};
use tensorfold_core::sampling::{RowDraw, SamplingParams};
use tensorfold_core::{CoreError, Result};
use tensorfold_model::{Logits, Qwen35};

pub use crate::api::FinishReason;

#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub penalties: crate::api::Penalties,
    /// Token ids that end the reply (not emitted) unless `ignore_eos`.
    pub stop_ids: Vec<u32>,
    pub ignore_eos: bool,
    /// Prompt rows per round; any value gives the same states and logits.
    pub prefill_chunk: usize,
    /// Keep the logits of every prompt position (teacher forcing).
    pub want_prompt_logits: bool,
}

#[derive(Clone, Debug)]
pub struct GenerateOutput {
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
    /// `[prompt_len, vocab]` when requested.
    pub prompt_logits: Option<Vec<f32>>,
    pub prompt_secs: f64,
    pub decode_secs: f64,
}

/// Decodes `req` alone; `on_token` sees each emitted token and returns false to stop early.
pub fn generate<B: Backend>(
    model: &Qwen35<B>,
    req: &GenerateRequest,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenerateOutput> {
    if req.prompt.is_empty() {
        return Err(CoreError::Invalid(
            "the prompt is empty: at least one token is needed".into(),
        ));
    }
    req.sampling.validate()?;
    let vocab = model.config.vocab_size;
    let mut slot = model.new_slot();
    let chunk = req.prefill_chunk.max(1);
    let started = Instant::now();
    let mut prompt_logits = req
        .want_prompt_logits
        .then(|| Vec::with_capacity(req.prompt.len() * vocab));
    let mut last = None;
    for (c, piece) in req.prompt.chunks(chunk).enumerate() {
        let base = c * chunk;
        let rows: Vec<RowRef> = (0..piece.len())
            .map(|i| RowRef::chain(0, base, 0, i))
            .collect();
        let is_last = base + piece.len() == req.prompt.len();
        let wanted: Vec<usize> = if req.want_prompt_logits {
            (0..piece.len()).collect()
        } else if is_last {
            vec![piece.len() - 1]
        } else {
            Vec::new()
        };
        let logits = model.forward_chains_round(&rows, piece, &mut [&mut slot], &wanted)?;
        if let Some(all) = prompt_logits.as_mut() {
            all.extend_from_slice(logits.host());
        }
        if is_last {
            last = Some(logits);
        }
    }
    // A token needs only its row's logits, its key and the penalties' edits: the backend draws it where the
    // logits are (a GPU reads back the token, not the row).
    let rule = req.sampling.keyed_rule(vocab);
    // The token at position `pos` from the last row of `logits`, given the completion so far.
    let next = |logits: &Logits<'_, B>, pos: usize, tokens: &[u32]| {
        let row = logits.rows() - 1;
        let edits = penalty_edits(row, &req.penalties, &req.prompt, tokens, vocab);
        logits.draws(
            &[RowDraw {
                row,
                rule,
                position: pos as u64,
            }],
            &edits,
        )[0]
    };
    let mut tokens = Vec::new();
    let mut finish = FinishReason::Length;
    // The first token is drawn within the prompt's time: its draw is what waits for the prompt's last round.
    let mut token = match (&last, req.max_tokens) {
        (Some(logits), 1..) => Some(next(logits, slot.len, &tokens)),
        _ => None,
    };
    let prompt_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    while let Some(t) = token.take() {
        if !req.ignore_eos && req.stop_ids.contains(&t) {
            finish = FinishReason::Stop;
            break;
        }
        tokens.push(t);
        if !on_token(t) {
            finish = FinishReason::Cancelled;
            break;
        }
        if tokens.len() == req.max_tokens {
            break;
        }
        let pos = slot.len;
        let logits = model.forward_chains_round(
            &[RowRef::chain(0, pos, 0, 0)],
            &[t],
            &mut [&mut slot],
            &[0],
        )?;
        token = Some(next(&logits, slot.len, &tokens));
    }
    Ok(GenerateOutput {
        tokens,
        finish,
        prompt_logits,
        prompt_secs,
        decode_secs: started.elapsed().as_secs_f64(),
    })
}
