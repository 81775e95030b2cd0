//! Edits of single logits before a draw (the penalties, `tensorfold-engine` penalties.rs), as plain f32 operations
//! a device repeats (tensorfold-cuda kernels/sample.cu edit_logits), so a penalised row can be drawn where the
//! logits are; and `draw_rows_keyed`, `Backend::draw_rows` on the host.

use super::{draw_keyed, RowDraw};
use std::borrow::Cow;

/// Logit `token` of logit row `row` becomes `apply(l)`: l − sub, then divided by `repetition` when positive and
/// multiplied by it otherwise. sub = 0 and repetition = 1 leave a logit's bits as they are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogitEdit {
    pub row: usize,
    pub token: u32,
    pub sub: f32,
    pub repetition: f32,
}

impl LogitEdit {
    pub fn apply(&self, l: f32) -> f32 {
        let v = l - self.sub;
        if v > 0.0 {
            v / self.repetition
        } else {
            v * self.repetition
        }
    }
}

/// Logit row number `index` (`row`) with its `edits` applied, copied only when one applies.
pub fn edited_row<'a>(row: &'a [f32], index: usize, edits: &[LogitEdit]) -> Cow<'a, [f32]> {
    let mut out = Cow::Borrowed(row);
    for e in edits.iter().filter(|e| e.row == index) {
        let l = &mut out.to_mut()[e.token as usize];
        *l = e.apply(*l);
    }
    out
}

/// `draw_keyed` of each draw's row of `logits` (`[rows, vocab]` row-major) with that row's `edits` applied first
/// (to a copy: `logits` stays as it is).
pub fn draw_rows_keyed(
    logits: &[f32],
    vocab: usize,
    draws: &[RowDraw],
    edits: &[LogitEdit],
) -> Vec<u32> {
    draws
        .iter()
        .map(|d| {
            let row = edited_row(&logits[d.row * vocab..(d.row + 1) * vocab], d.row, edits);
            draw_keyed(&row, d.rule, d.position)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::KeyedRule;
    use super::*;

    #[test]
    fn an_edit_subtracts_then_shrinks_toward_lower_probability() {
        let e = |sub, repetition| LogitEdit {
            row: 0,
            token: 0,
            sub,
            repetition,
        };
        assert_eq!(e(0.5, 2.0).apply(3.0), 1.25);
        assert_eq!(e(0.5, 2.0).apply(0.25), -0.5);
        for l in [1.5f32, -0.0, 0.0, -7.25, f32::NEG_INFINITY] {
            assert_eq!(e(0.0, 1.0).apply(l).to_bits(), l.to_bits());
        }
        assert!(e(0.0, 1.0).apply(f32::NAN).is_nan());
    }

    #[test]
    fn edits_change_only_their_own_rows_draws() {
        let logits = [1.0f32, 2.0, 3.0, 3.0, 2.0, 1.0];
        let draw = |row| RowDraw {
            row,
            rule: KeyedRule::Greedy,
            position: 0,
        };
        let edit = LogitEdit {
            row: 1,
            token: 0,
            sub: 0.0,
            repetition: 2.0,
        };
        assert_eq!(
            draw_rows_keyed(&logits, 3, &[draw(0), draw(1)], &[edit]),
            vec![2, 1]
        );
        assert_eq!(
            draw_rows_keyed(&logits, 3, &[draw(0), draw(1)], &[]),
            vec![2, 0]
        );
        let lower = LogitEdit {
            token: 1,
            sub: 2.5,
            ..edit
        };
        assert_eq!(draw_rows_keyed(&logits, 3, &[draw(1)], &[lower]), vec![0]);
    }
}
