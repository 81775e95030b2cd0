//! A round's logits left where the backend computed them: the host reads a row only when it needs one
//! (penalties, logprobs, cut sampling), and keyed draws run on the backend, so a GPU round reads back a token per
//! row instead of a vocabulary of floats.

use std::sync::OnceLock;
use tensorfold_backend::Backend;
use tensorfold_core::sampling::{draw_rows_keyed, row_top, LogitEdit, RowDraw, RowTop};

pub struct Logits<'a, B: Backend> {
    backend: &'a B,
    /// `[rows, vocab]`; None when the round asked for no logits.
    act: Option<B::Act>,
    rows: usize,
    vocab: usize,
    /// Every row on the host, once one was wanted by a backend that draws on the host anyway.
    host: OnceLock<Vec<f32>>,
}

impl<'a, B: Backend> Logits<'a, B> {
    pub(crate) fn new(backend: &'a B, act: Option<B::Act>, vocab: usize) -> Self {
        let rows = act.as_ref().map_or(0, |a| backend.act_shape(a).0);
        Logits {
            backend,
            act,
            rows,
            vocab,
            host: OnceLock::new(),
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Row `i` on the host (a device copies just that row).
    pub fn row(&self, i: usize) -> Vec<f32> {
        assert!(i < self.rows, "logit row {i} of {}", self.rows);
        if let Some(h) = self.host.get() {
            return h[i * self.vocab..(i + 1) * self.vocab].to_vec();
        }
        match &self.act {
            Some(a) if self.backend.draws_on_device() => self.backend.rows_to_host(a, i, 1),
            _ => self.host()[i * self.vocab..(i + 1) * self.vocab].to_vec(),
        }
    }

    /// Every row on the host, `[rows, vocab]` row-major (read once, then kept).
    pub fn host(&self) -> &[f32] {
        self.host.get_or_init(|| match &self.act {
            Some(a) => self.backend.to_host(a),
            None => Vec::new(),
        })
    }

    /// `host`, taken.
    pub fn into_host(self) -> Vec<f32> {
        self.host();
        self.host.into_inner().unwrap_or_default()
    }

    /// The keyed draws of `draws` (`sampling::draw_keyed` on each named row, with that row's `edits` applied
    /// first), run by the backend. With TENSORFOLD_HOST_DRAWS=1 the rows are read to the host and drawn there
    /// instead (the same tokens; for measuring what drawing on the device saves).
    pub fn draws(&self, draws: &[RowDraw], edits: &[LogitEdit]) -> Vec<u32> {
        if let Some(bad) = draws.iter().find(|d| d.row >= self.rows) {
            panic!("draw of logit row {} of {}", bad.row, self.rows);
        }
        if let Some(bad) = edits
            .iter()
            .find(|e| e.row >= self.rows || e.token as usize >= self.vocab)
        {
            panic!(
                "edit of logit {} of row {} ({} rows of {})",
                bad.token, bad.row, self.rows, self.vocab
            );
        }
        match &self.act {
            Some(a) if !host_draws() => self.backend.draw_rows(a, draws, edits),
            _ => draw_rows_keyed(self.host(), self.vocab, draws, edits),
        }
    }
}

impl<B: Backend> Logits<'_, B> {
    /// `sampling::row_top` of each (row, inv_t, count): on the backend where it draws, else on the host rows.
    pub fn tops(&self, asks: &[(usize, f64, usize)]) -> Vec<RowTop> {
        if let Some(bad) = asks.iter().find(|a| a.0 >= self.rows) {
            panic!("ranks of logit row {} of {}", bad.0, self.rows);
        }
        match &self.act {
            Some(a) if self.backend.draws_on_device() && !host_draws() => {
                self.backend.row_tops(a, asks)
            }
            _ => asks
                .iter()
                .map(|&(r, inv_t, count)| {
                    row_top(
                        &self.host()[r * self.vocab..(r + 1) * self.vocab],
                        inv_t,
                        count,
                    )
                })
                .collect(),
        }
    }
}

fn host_draws() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("TENSORFOLD_HOST_DRAWS").is_ok_and(|v| v == "1"))
}
