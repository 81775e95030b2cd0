//! Presence, frequency and repetition penalties. A row's penalty depends only on the tokens on its own path
//! (prompt and the completion before it), which is what keeps penalised replies exact under drafting and batching.

use crate::api::Penalties;
use std::collections::HashMap;

/// Applies `p` to one row of logits given the prompt and the completion tokens before this row.
pub fn apply_penalties(row: &mut [f32], p: &Penalties, prompt: &[u32], completion: &[u32]) {
    if p.is_off() {
        return;
    }
    let mut counts: HashMap<u32, u32> = HashMap::new();
    for &t in completion {
        *counts.entry(t).or_default() += 1;
    }
    if p.presence != 0.0 || p.frequency != 0.0 {
        for (&t, &n) in &counts {
            if let Some(l) = row.get_mut(t as usize) {
                *l -= p.presence + p.frequency * n as f32;
            }
        }
    }
    if p.repetition != 1.0 {
        let mut seen: Vec<u32> = prompt.iter().chain(completion).copied().collect();
        seen.sort_unstable();
        seen.dedup();
        for t in seen {
            if let Some(l) = row.get_mut(t as usize) {
                *l = if *l > 0.0 {
                    *l / p.repetition
                } else {
                    *l * p.repetition
                };
            }
        }
    }
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
