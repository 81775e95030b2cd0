//! The walk of a round's window: draw from the pending row on, follow the first draft child whose token equals
//! the draw, send each drawn token to the stream, and return the accepted path for keep.

use crate::api::{Event, FinishReason, TokenLogprob};
use crate::penalties::apply_penalties;
use crate::round::Stream;
use tensorfold_backend::{Backend, RowRef};
use tensorfold_core::sampling::draw;

/// A logit row as the walk gets it: the token the backend drew, or the logits for the host to draw from.
pub(crate) enum RowOut {
    Drawn(u32),
    Logits(Vec<f32>),
}

/// Draws from row `start` on, following the first child whose token equals each draw; emits every drawn token
/// and returns the kept path (round rows, root first). The last draw without a matching child becomes pending.
pub(crate) fn walk<B: Backend>(
    st: &mut Stream<B>,
    rows: &[RowRef],
    start: usize,
    children: &[(usize, usize, u32)],
    row_logits: &mut impl FnMut(usize) -> RowOut,
) -> Vec<usize> {
    let mut path = vec![start];
    let mut cur = start;
    if st.generated().len() >= st.req.max_tokens {
        st.finished = Some(FinishReason::Length);
        return path;
    }
    st.usage.rounds += 1;
    loop {
        let (token, logprob) = match row_logits(cur) {
            RowOut::Drawn(t) => (t, None),
            RowOut::Logits(mut row) => {
                apply_penalties(&mut row, &st.req.penalties, &st.req.prompt, st.generated());
                let token = draw(&row, &st.req.sampling, rows[cur].pos as u64 + 1);
                let logprob = st
                    .req
                    .logprobs
                    .map(|n| token_logprob(&row, token, n, st.req.sampling.temperature));
                (token, logprob)
            }
        };
        if !st.req.ignore_eos && st.req.stop_ids.contains(&token) {
            st.finished = Some(FinishReason::Stop);
            return path;
        }
        st.tokens.push(token);
        st.first_token_secs
            .get_or_insert_with(|| st.started.elapsed().as_secs_f64());
        if st.events.send(Event::Token { id: token, logprob }).is_err() {
            st.finished = Some(FinishReason::Cancelled);
            return path;
        }
        if st.generated().len() >= st.req.max_tokens {
            st.finished = Some(FinishReason::Length);
            return path;
        }
        match children
            .iter()
            .find(|&&(_, parent, t)| parent == cur && t == token)
        {
            Some(&(r, _, _)) => {
                path.push(r);
                cur = r;
            }
            None => {
                st.pending = Some(token);
                return path;
            }
        }
    }
}

/// Log-probability of `token` under softmax(row / T) (T = 1 when greedy) and the `n` best alternatives.
fn token_logprob(row: &[f32], token: u32, n: usize, temperature: f32) -> TokenLogprob {
    let t = if temperature > 0.0 {
        temperature as f64
    } else {
        1.0
    };
    let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64 / t;
    let lse = m + row
        .iter()
        .map(|&l| (l as f64 / t - m).exp())
        .sum::<f64>()
        .ln();
    let lp = |id: u32| (row[id as usize] as f64 / t - lse) as f32;
    let n = n.min(row.len());
    let mut top: Vec<u32> = (0..row.len() as u32).collect();
    let by_rank = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
    if n > 0 {
        top.select_nth_unstable_by(n - 1, by_rank);
        top.truncate(n);
        top.sort_by(by_rank);
    } else {
        top.clear();
    }
    TokenLogprob {
        logprob: lp(token),
        top: top.into_iter().map(|id| (id, lp(id))).collect(),
    }
}
