//! Draws on the device against the host's: keyed draws token for token, and a cut draw's best ranks and
//! softmax total (row_top) bit for bit, then its tokens.

use super::{act, Report, Rng};
use crate::CudaBackend;
use tensorfold_backend::Backend;
use tensorfold_core::sampling::{
    draw_keyed, draw_rows_keyed, row_top, Cut, KeyedRule, LogitEdit, RowDraw, RowTop, TOP_MAX,
};

/// Keyed draws on the device against `sampling::draw_keyed` on the host, token for token: greedy and Gumbel at
/// several temperatures, seeds and positions, over a vocabulary that ends inside a span, on `special_rows`.
pub(super) fn check_draws(rep: &mut Report, gpu: &CudaBackend, rng: &mut Rng) {
    let vocab = 3 * 8192 + 1234;
    let data = special_rows(rng, vocab);
    let rows = data.len() / vocab;
    let logits = act(gpu, rows, vocab, &data);
    let mut draws = Vec::new();
    for row in 0..rows {
        draws.push(RowDraw {
            row,
            rule: KeyedRule::Greedy,
            position: 0,
        });
        for t in [0.3f32, 0.8, 1.0, 1.7] {
            for p in 0..3 {
                draws.push(RowDraw {
                    row,
                    rule: KeyedRule::Gumbel {
                        inv_t: 1.0 / t as f64,
                        seed: rng.next(),
                    },
                    position: 1000 * p + row as u64,
                });
            }
        }
    }
    let want: Vec<u32> = draws
        .iter()
        .map(|d| {
            draw_keyed(
                &data[d.row * vocab..(d.row + 1) * vocab],
                d.rule,
                d.position,
            )
        })
        .collect();
    rep.same_ids(
        &format!("keyed draws on the device vs the host, {rows} rows of {vocab}"),
        &gpu.draw_rows(&logits, &draws, &[]),
        &want,
    );
}

/// Rows of logits for the draw checks: random, a top run of ties (a tie for the maximum, and a top-k cut inside
/// equal logits), NaN and −∞ scattered, −∞ only (a NaN total), NaN only (nothing valid), flat (where the noise
/// alone decides), and a few values above a sea of −∞.
fn special_rows(rng: &mut Rng, vocab: usize) -> Vec<f32> {
    let rows = 7;
    let mut data = rng.vec(rows * vocab, 4.0);
    for i in (0..vocab).step_by(9) {
        data[vocab + i] = 11.0;
    }
    for i in (0..vocab).step_by(97) {
        data[2 * vocab + i] = if i % 2 == 0 {
            f32::NAN
        } else {
            f32::NEG_INFINITY
        };
    }
    data[3 * vocab..4 * vocab].fill(f32::NEG_INFINITY);
    data[4 * vocab..5 * vocab].fill(f32::NAN);
    data[5 * vocab..6 * vocab].fill(0.25);
    data[6 * vocab..].fill(f32::NEG_INFINITY);
    for (k, i) in [3usize, 500, 20_000, 25_000].into_iter().enumerate() {
        data[6 * vocab + i] = k as f32 - 1.0;
    }
    data
}

fn same_top(a: &RowTop, b: &RowTop) -> bool {
    let total = a.total.to_bits() == b.total.to_bits() || (a.total.is_nan() && b.total.is_nan());
    let ranked = a.ranked.len() == b.ranked.len()
        && a.ranked
            .iter()
            .zip(&b.ranked)
            .all(|(x, y)| x.0 == y.0 && x.1.to_bits() == y.1.to_bits());
    total && ranked && a.valid == b.valid
}

/// row_top on the device against `sampling::row_top`, bit for bit, at several counts and temperatures; then cut
/// draws (top-k, top-p, min-p and their mixes, one top_k above TOP_MAX and a top-p wider than TOP_MAX ranks, which
/// the host finishes from the whole row) against `draw_keyed` token for token.
pub(super) fn check_cut_draws(rep: &mut Report, gpu: &CudaBackend, rng: &mut Rng) {
    let vocab = 3 * 8192 + 1234;
    let data = special_rows(rng, vocab);
    let rows = data.len() / vocab;
    let logits = act(gpu, rows, vocab, &data);
    let mut asks = Vec::new();
    for row in 0..rows {
        for (count, t) in [
            (1usize, 1.0f32),
            (7, 0.3),
            (40, 0.8),
            (1000, 1.7),
            (TOP_MAX, 1.0),
        ] {
            asks.push((row, 1.0 / t as f64, count));
        }
    }
    let got = crate::sample::row_tops(&gpu.dev, &logits, &asks);
    let bad = asks
        .iter()
        .zip(&got)
        .filter(|((row, inv_t, count), g)| {
            !same_top(
                g,
                &row_top(&data[row * vocab..(row + 1) * vocab], *inv_t, *count),
            )
        })
        .count();
    rep.none_differ(
        &format!("row_top (best ranks and softmax total) on the device vs the host, {rows} rows of {vocab}"),
        bad,
        asks.len(),
    );
    let mut draws = Vec::new();
    for row in 0..rows {
        for (top_k, top_p, min_p) in [
            (40usize, 0.95f32, 0.0f32),
            (20, 1.0, 0.0),
            (0, 0.9, 0.0),
            (0, 1.0, 0.05),
            (5, 0.5, 0.1),
            (1, 1.0, 0.0),
            (2000, 0.95, 0.0),
            (0, 0.999, 0.0),
        ] {
            for t in [0.3f32, 1.0] {
                draws.push(RowDraw {
                    row,
                    rule: KeyedRule::Cut(Cut {
                        inv_t: 1.0 / t as f64,
                        seed: rng.next(),
                        top_k,
                        top_p,
                        min_p,
                    }),
                    position: rng.next() % 5000,
                });
            }
        }
        draws.push(RowDraw {
            row,
            rule: KeyedRule::Greedy,
            position: 0,
        });
        draws.push(RowDraw {
            row,
            rule: KeyedRule::Gumbel {
                inv_t: 1.0,
                seed: rng.next(),
            },
            position: 9,
        });
    }
    let host = |edits: &[LogitEdit]| draw_rows_keyed(&data, vocab, &draws, edits);
    rep.same_ids(
        &format!("cut draws (device ranks, host walk) vs the host, {rows} rows of {vocab}"),
        &gpu.draw_rows(&logits, &draws, &[]),
        &host(&[]),
    );
    // Penalties as edits: the best ranks of row 0 lowered, a spread of row 2's tokens shrunk, row 6's best moved.
    let mut edits = Vec::new();
    for &(token, _) in &row_top(&data[..vocab], 1.0, 10).ranked {
        edits.push(LogitEdit {
            row: 0,
            token,
            sub: 1.5,
            repetition: 1.3,
        });
    }
    for token in (0..400).step_by(7) {
        edits.push(LogitEdit {
            row: 2,
            token,
            sub: 0.0,
            repetition: 2.0,
        });
    }
    edits.push(LogitEdit {
        row: 6,
        token: 25_000,
        sub: 0.5,
        repetition: 1.5,
    });
    let want = host(&edits);
    let moved = want
        .iter()
        .zip(host(&[]))
        .filter(|(a, b)| **a != *b)
        .count();
    rep.same_ids(
        &format!(
            "penalised draws (edits on copies of 3 rows; {moved} tokens moved by them) vs the host"
        ),
        &gpu.draw_rows(&logits, &draws, &edits),
        &want,
    );
    // The logits themselves stay as they were.
    rep.same("logits after penalised draws", &gpu.to_host(&logits), &data);
}
