//! Keyed draws on the device (kernels/sample.cu): a round reads back one token per drawn row instead of its
//! vocabulary of logits, and the host never loops over the vocabulary.

use crate::device::{Arg, Dev};
use crate::ops::CudaAct;
use tensorfold_core::sampling::{KeyedRule, RowDraw};

/// Logits per block of draw_partial (sample.cu DRAW_SPAN) and its threads.
const DRAW_SPAN: usize = 8192;
const DRAW_THREADS: u32 = 256;

/// The token of each draw: `sampling::draw_keyed` of row `d.row` of `logits`, with the host's bits.
pub(crate) fn draw_rows(dev: &Dev, logits: &CudaAct, draws: &[RowDraw]) -> Vec<u32> {
    if draws.is_empty() {
        return Vec::new();
    }
    let n = draws.len();
    assert!(
        n <= 65_535,
        "draw_rows: {n} draws in one call (at most 65,535)"
    );
    let mut desc = Vec::with_capacity(5 * n);
    for d in draws {
        assert!(
            d.row < logits.rows,
            "draw of logit row {} of {}",
            d.row,
            logits.rows
        );
        let (greedy, inv_t, seed) = match d.rule {
            KeyedRule::Greedy => (1, 0.0f64, 0),
            KeyedRule::Gumbel { inv_t, seed } => (0, inv_t, seed),
        };
        desc.extend([d.row as u64, greedy, inv_t.to_bits(), seed, d.position]);
    }
    let desc = dev.upload(&desc);
    let spans = logits.cols.div_ceil(DRAW_SPAN);
    let pv = dev.scratch::<f64>(n * spans);
    let pi = dev.scratch::<i32>(n * spans);
    let out = dev.scratch::<i32>(n);
    dev.launch(
        "draw_partial",
        (spans as u32, n as u32, 1),
        DRAW_THREADS,
        &[
            Arg::P(dev.ptr(&logits.buf)),
            Arg::P(dev.ptr(&desc)),
            Arg::I(logits.cols as i32),
            Arg::P(dev.ptr(&pv)),
            Arg::P(dev.ptr(&pi)),
        ],
    );
    dev.launch(
        "draw_finish",
        (n as u32, 1, 1),
        32,
        &[
            Arg::P(dev.ptr(&pv)),
            Arg::P(dev.ptr(&pi)),
            Arg::I(spans as i32),
            Arg::P(dev.ptr(&out)),
        ],
    );
    dev.download_i32(&out, n)
        .into_iter()
        .map(|t| t as u32)
        .collect()
}
