//! A cut draw from a row's best ranks and softmax total alone, which a device computes where the logits are
//! (tensorfold-cuda kernels/sample.cu row_top): a round then reads back a few thousand bytes a row, not the
//! vocabulary, and the host finishes the draw with the same walk and noise as `draw_keyed`.

use super::{by_rank, gumbel_max, keyed_total, walk_keep, Cut};

/// The most ranks `row_top` gives (sample.cu TOP_MAX).
pub const TOP_MAX: usize = 1024;

/// What a cut draw needs of one logit row.
#[derive(Clone, Debug, PartialEq)]
pub struct RowTop {
    /// The best ranks as (id, logit), best first (larger logit, ties to the lower id); never NaN.
    pub ranked: Vec<(u32, f32)>,
    /// How many of the row's logits are not NaN.
    pub valid: usize,
    /// `keyed_total` of the row at the draw's inv_t, with max the best rank's l·inv_t (0 when none is valid).
    pub total: f64,
}

/// How many best ranks to ask for a cut draw: its top_k up to TOP_MAX, and TOP_MAX when it has no top-k (a
/// top-p or min-p cut mostly ends well before; `draw_from_top` says when it does not). None for a larger top_k.
pub fn top_count(cut: &Cut) -> Option<usize> {
    match cut.top_k {
        0 => Some(TOP_MAX),
        k if k <= TOP_MAX => Some(k),
        _ => None,
    }
}

/// The `count` best ranks of `logits` and its total at `inv_t`: what a device's row_top gives, bit for bit.
pub fn row_top(logits: &[f32], inv_t: f64, count: usize) -> RowTop {
    let by_rank = |a: &u32, b: &u32| by_rank(logits, *a, *b);
    let mut ids: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| !logits[i as usize].is_nan())
        .collect();
    let valid = ids.len();
    let c = count.min(valid);
    if c == 0 {
        return RowTop {
            ranked: Vec::new(),
            valid,
            total: 0.0,
        };
    }
    if c < valid {
        ids.select_nth_unstable_by(c - 1, by_rank);
        ids.truncate(c);
    }
    ids.sort_unstable_by(by_rank);
    let max = logits[ids[0] as usize] as f64 * inv_t;
    RowTop {
        ranked: ids.iter().map(|&i| (i, logits[i as usize])).collect(),
        valid,
        total: keyed_total(logits, inv_t, max),
    }
}

/// `draw_keyed(row, KeyedRule::Cut(cut), position)` from `row_top(row, cut.inv_t, _)`, or None when the ranks
/// end before the cut does (then only the whole row can say).
pub fn draw_from_top(top: &RowTop, cut: &Cut, position: u64) -> Option<u32> {
    if top.valid == 0 {
        return Some(0);
    }
    let n = if cut.top_k > 0 && cut.top_k < top.valid {
        cut.top_k
    } else {
        top.valid
    };
    let max = top.ranked[0].1 as f64 * cut.inv_t;
    let keep = walk_keep(
        n,
        |rank| top.ranked.get(rank).map(|r| r.1),
        cut,
        max,
        top.total,
    )?;
    Some(gumbel_max(
        top.ranked[..keep].iter().copied(),
        cut,
        position,
    ))
}

#[cfg(test)]
mod tests {
    use super::super::{draw_keyed, KeyedRule};
    use super::*;

    proptest::proptest! {
        #[test]
        fn a_draw_from_the_best_ranks_is_the_draw_from_the_whole_row_or_none(
            raw in proptest::collection::vec(-40i32..40, 1..600),
            specials in 0usize..9,
            top_k in 0usize..80,
            top_p in 0.05f32..1.0,
            min_p in 0.0f32..0.3,
            temperature in 0.1f32..3.0,
            count in 1usize..120,
            seed in 0u64..1000,
        ) {
            // Coarse values, so ties are common; NaN and −∞ every few ids.
            let row: Vec<f32> = raw
                .iter()
                .enumerate()
                .map(|(i, &v)| match (specials > 0 && i % (specials + 2) == 0, i % 2) {
                    (true, 0) => f32::NAN,
                    (true, _) => f32::NEG_INFINITY,
                    _ => v as f32 * 0.25,
                })
                .collect();
            let cut = Cut { inv_t: 1.0 / temperature as f64, seed, top_k, top_p, min_p };
            for position in [0u64, 7, 123] {
                let want = draw_keyed(&row, KeyedRule::Cut(cut), position);
                let top = row_top(&row, cut.inv_t, count);
                if let Some(got) = draw_from_top(&top, &cut, position) {
                    proptest::prop_assert_eq!(got, want);
                }
                // Every rank, or top_k's, always decides.
                let all = row_top(&row, cut.inv_t, top_count(&cut).unwrap().max(row.len()));
                proptest::prop_assert_eq!(draw_from_top(&all, &cut, position), Some(want));
                if top_k > 0 {
                    let k = row_top(&row, cut.inv_t, top_k);
                    proptest::prop_assert_eq!(draw_from_top(&k, &cut, position), Some(want));
                }
            }
        }
    }

    #[test]
    fn the_best_ranks_end_too_soon_only_when_the_cut_is_wider() {
        // A flat row: top-p 0.5 keeps half of 100 ranks, so 10 ranks cannot decide and 60 can.
        let row = vec![1.0f32; 100];
        let cut = Cut {
            inv_t: 1.0,
            seed: 1,
            top_k: 0,
            top_p: 0.5,
            min_p: 0.0,
        };
        assert_eq!(draw_from_top(&row_top(&row, 1.0, 10), &cut, 3), None);
        let want = draw_keyed(&row, KeyedRule::Cut(cut), 3);
        assert_eq!(draw_from_top(&row_top(&row, 1.0, 60), &cut, 3), Some(want));
        let nothing = row_top(&[f32::NAN; 5], 1.0, 4);
        assert_eq!((nothing.valid, nothing.total), (0, 0.0));
        assert_eq!(draw_from_top(&nothing, &cut, 3), Some(0));
    }
}
