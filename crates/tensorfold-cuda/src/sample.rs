//! Draws on the device (kernels/sample.cu): a round reads back one token per keyed row (greedy or uncut Gumbel)
//! and a few thousand bytes per cut row (its best ranks and softmax total, from which the host finishes the
//! draw), instead of a vocabulary of logits, and the host never loops over the vocabulary; penalties are applied
//! to copies of their rows there first.

use crate::device::{Arg, Dev};
use crate::ops::CudaAct;
use crate::scratch::Buf;
use tensorfold_core::sampling::{
    draw_from_top, draw_keyed, top_count, KeyedRule, LogitEdit, RowDraw, RowTop, TOP_MAX,
};

/// Logits per block of draw_partial (sample.cu DRAW_SPAN) and its threads.
const DRAW_SPAN: usize = 8192;
const DRAW_THREADS: u32 = 256;
/// row_top's threads (sample.cu TOP_THREADS) and the words of one answer (TOP_WORDS).
const TOP_THREADS: u32 = 1024;
const TOP_WORDS: usize = 4 + 2 * TOP_MAX;

/// `draw_rows` with each row's `edits` applied first: the edited rows are copied out and edited
/// there by edit_logits, so `logits` stays as it is.
pub(crate) fn draw_edited_rows(
    dev: &Dev,
    logits: &CudaAct,
    draws: &[RowDraw],
    edits: &[LogitEdit],
) -> Vec<u32> {
    if edits.is_empty() {
        return draw_rows(dev, logits, draws);
    }
    let mut rows: Vec<usize> = edits.iter().map(|e| e.row).collect();
    rows.sort_unstable();
    rows.dedup();
    // One copy a row (gather_rows, one block a row, took 165 µs for a row of 248,320 logits; a copy runs at the
    // device's bandwidth).
    let mut buf = dev.scratch::<f32>(rows.len() * logits.cols);
    for (i, &r) in rows.iter().enumerate() {
        dev.copy_at(
            &logits.buf,
            r * logits.cols,
            &mut buf,
            i * logits.cols,
            logits.cols,
        );
    }
    let copy = CudaAct::from_buf(rows.len(), logits.cols, std::sync::Arc::new(buf));
    let at = |row: usize| rows.binary_search(&row).ok();
    let desc: Vec<u32> = edits
        .iter()
        .flat_map(|e| {
            assert!(
                (e.token as usize) < logits.cols,
                "edit of logit {} of {}",
                e.token,
                logits.cols
            );
            [
                at(e.row).expect("listed") as u32,
                e.token,
                e.sub.to_bits(),
                e.repetition.to_bits(),
            ]
        })
        .collect();
    let desc = dev.stage(&desc);
    let threads = 256u32;
    dev.launch(
        "edit_logits",
        ((edits.len() as u32).div_ceil(threads), 1, 1),
        threads,
        &[
            Arg::P(dev.ptr(&copy.buf)),
            Arg::P(dev.staged_ptr(&desc)),
            Arg::I(edits.len() as i32),
            Arg::I(logits.cols as i32),
        ],
    );
    let (mut edited, mut plain) = (Vec::new(), Vec::new());
    for (i, d) in draws.iter().enumerate() {
        match at(d.row) {
            Some(r) => edited.push((i, RowDraw { row: r, ..*d })),
            None => plain.push((i, *d)),
        }
    }
    let mut out = vec![0u32; draws.len()];
    for (list, from) in [(edited, &copy), (plain, logits)] {
        let ds: Vec<RowDraw> = list.iter().map(|p| p.1).collect();
        for ((i, _), t) in list.iter().zip(draw_rows(dev, from, &ds)) {
            out[*i] = t;
        }
    }
    out
}

/// The token of each draw: `sampling::draw_keyed` of row `d.row` of `logits`, with the host's bits. Keyed rows
/// are drawn on the device; a cut row's best ranks come from the device and the host draws from them, or from
/// the whole row when they end before the cut (or its top_k is above TOP_MAX).
pub(crate) fn draw_rows(dev: &Dev, logits: &CudaAct, draws: &[RowDraw]) -> Vec<u32> {
    if draws.is_empty() {
        return Vec::new();
    }
    assert!(
        draws.len() <= 65_535,
        "draw_rows: {} draws in one call (at most 65,535)",
        draws.len()
    );
    if let Some(bad) = draws.iter().find(|d| d.row >= logits.rows) {
        panic!("draw of logit row {} of {}", bad.row, logits.rows);
    }
    let (mut keyed, mut cut, mut whole) = (Vec::new(), Vec::new(), Vec::new());
    for (i, d) in draws.iter().enumerate() {
        match d.rule {
            KeyedRule::Cut(c) => match top_count(&c) {
                Some(count) => cut.push((i, c, count)),
                None => whole.push(i),
            },
            _ => keyed.push(i),
        }
    }
    // Both kernels are queued before either answer is read.
    let drawn = launch_keyed(dev, logits, keyed.iter().map(|&i| &draws[i]));
    let asks: Vec<(usize, f64, usize)> = cut
        .iter()
        .map(|&(i, c, count)| (draws[i].row, c.inv_t, count))
        .collect();
    let tops = launch_tops(dev, logits, &asks);
    let mut out = vec![0u32; draws.len()];
    if let Some(buf) = drawn {
        for (&i, t) in keyed.iter().zip(dev.download_i32(&buf, keyed.len())) {
            out[i] = t as u32;
        }
    }
    if let Some(buf) = tops {
        let words = dev.download_small(&buf, asks.len() * TOP_WORDS);
        for (&(i, c, _), w) in cut.iter().zip(words.chunks(TOP_WORDS)) {
            match draw_from_top(&row_top_of(w), &c, draws[i].position) {
                Some(t) => out[i] = t,
                None => whole.push(i),
            }
        }
    }
    for i in whole {
        let d = &draws[i];
        let row = dev.download_at(&logits.buf, d.row * logits.cols, logits.cols);
        out[i] = draw_keyed(&row, d.rule, d.position);
    }
    out
}

/// Queues draw_partial and draw_finish for greedy and Gumbel draws; the tokens are in the buffer returned.
fn launch_keyed<'a>(
    dev: &Dev,
    logits: &CudaAct,
    draws: impl Iterator<Item = &'a RowDraw>,
) -> Option<Buf<i32>> {
    let mut desc = Vec::new();
    for d in draws {
        let (greedy, inv_t, seed) = match d.rule {
            KeyedRule::Greedy => (1, 0.0f64, 0),
            KeyedRule::Gumbel { inv_t, seed } => (0, inv_t, seed),
            KeyedRule::Cut(_) => unreachable!("cut draws take row_top"),
        };
        desc.extend([d.row as u64, greedy, inv_t.to_bits(), seed, d.position]);
    }
    let n = desc.len() / 5;
    if n == 0 {
        return None;
    }
    let desc = dev.stage(&desc);
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
            Arg::P(dev.staged_ptr(&desc)),
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
    Some(out)
}

/// Queues row_top for each (row, inv_t, count); the answers, TOP_WORDS words each, are in the buffer returned.
fn launch_tops(dev: &Dev, logits: &CudaAct, asks: &[(usize, f64, usize)]) -> Option<Buf<u32>> {
    if asks.is_empty() {
        return None;
    }
    let desc: Vec<u64> = asks
        .iter()
        .flat_map(|&(row, inv_t, count)| [row as u64, inv_t.to_bits(), count.min(TOP_MAX) as u64])
        .collect();
    let desc = dev.stage(&desc);
    let out = dev.scratch::<u32>(asks.len() * TOP_WORDS);
    dev.launch(
        "row_top",
        (asks.len() as u32, 1, 1),
        TOP_THREADS,
        &[
            Arg::P(dev.ptr(&logits.buf)),
            Arg::P(dev.staged_ptr(&desc)),
            Arg::I(logits.cols as i32),
            Arg::P(dev.ptr(&out)),
        ],
    );
    Some(out)
}

/// `sampling::row_top`'s answer from one row_top answer (its ranks sorted here, best first).
fn row_top_of(w: &[u32]) -> RowTop {
    let c = w[0] as usize;
    let mut ranked: Vec<(u32, f32)> = (0..c)
        .map(|j| (w[4 + j], f32::from_bits(w[4 + TOP_MAX + j])))
        .collect();
    ranked.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    RowTop {
        ranked,
        valid: w[1] as usize,
        total: f64::from_bits(w[2] as u64 | (w[3] as u64) << 32),
    }
}

/// The best ranks of each (row, inv_t, count) as the device finds them: for the backend-ops test against
/// `sampling::row_top`.
pub(crate) fn row_tops(dev: &Dev, logits: &CudaAct, asks: &[(usize, f64, usize)]) -> Vec<RowTop> {
    match launch_tops(dev, logits, asks) {
        Some(buf) => dev
            .download_small(&buf, asks.len() * TOP_WORDS)
            .chunks(TOP_WORDS)
            .map(row_top_of)
            .collect(),
        None => Vec::new(),
    }
}
