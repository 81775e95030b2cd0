//! Presence, frequency and repetition penalties. A row's penalty depends only on the tokens on its own path
//! (prompt and the completion before it), which is what keeps penalised replies exact under drafting and batching.

use crate::api::Penalties;
use std::collections::{BTreeMap, HashMap};
use tensorfold_core::sampling::LogitEdit;

/// Applies `p` to one row of logits given the prompt and the completion tokens before this row.
pub fn apply_penalties(row: &mut [f32], p: &Penalties, prompt: &[u32], completion: &[u32]) {
    for e in penalty_edits(0, p, prompt, completion, row.len()) {
        let l = &mut row[e.token as usize];
        *l = e.apply(*l);
    }
}

/// `p` as edits of logit row `row` (of `vocab` logits), one per token it changes, in token order: each completion
/// token's logit less presence + frequency·count, then every seen token's (prompt or completion) divided by the
/// repetition penalty when positive, multiplied by it otherwise. A backend can apply them where the logits are.
pub fn penalty_edits(
    row: usize,
    p: &Penalties,
    prompt: &[u32],
    completion: &[u32],
    vocab: usize,
) -> Vec<LogitEdit> {
    if p.is_off() {
        return Vec::new();
    }
    let mut edits: BTreeMap<u32, LogitEdit> = BTreeMap::new();
    let blank = |t: u32| LogitEdit {
        row,
        token: t,
        sub: 0.0,
        repetition: 1.0,
    };
    if p.presence != 0.0 || p.frequency != 0.0 {
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for &t in completion {
            *counts.entry(t).or_default() += 1;
        }
        for (t, n) in counts {
            edits.insert(
                t,
                LogitEdit {
                    sub: p.presence + p.frequency * n as f32,
                    ..blank(t)
                },
            );
        }
    }
    if p.repetition != 1.0 {
        for &t in prompt.iter().chain(completion) {
            edits.entry(t).or_insert_with(|| blank(t)).repetition = p.repetition;
        }
    }
    edits.retain(|&t, _| (t as usize) < vocab);
    edits.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_and_frequency_subtract_per_completion_token() {
        let mut row = vec![1.0f32; 4];
        let p = Penalties {
            presence: 0.5,
            frequency: 0.25,
            repetition: 1.0,
        };
        apply_penalties(&mut row, &p, &[3], &[1, 1, 2]);
        assert_eq!(row, vec![1.0, 1.0 - 0.5 - 0.5, 1.0 - 0.5 - 0.25, 1.0]);
    }

    #[test]
    fn repetition_shrinks_seen_logits_toward_lower_probability() {
        let mut row = vec![2.0f32, -2.0, 2.0];
        let p = Penalties {
            presence: 0.0,
            frequency: 0.0,
            repetition: 2.0,
        };
        apply_penalties(&mut row, &p, &[0], &[1]);
        assert_eq!(row, vec![1.0, -4.0, 2.0]);
    }
}
