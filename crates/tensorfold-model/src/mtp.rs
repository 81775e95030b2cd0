//! The Qwen3.5 multi-token-prediction head (`mtp.*`) as a drafter: fc over [norm(embed(next)); norm(target hidden)],
//! one gated full-attention block with its own per-slot KV, the target's lm_head. Rows and keep work as the target's.

use crate::qwen35::Qwen35;
use crate::Logits;
use tensorfold_backend::{AttnParams, AttnSpec, Backend, RowRef};
use tensorfold_core::stored::{Bytes, DenseDType};
use tensorfold_core::{Checkpoint, CoreError, Result, StoredMatrix};

/// The bound `mtp.*` tensors (one decoder layer, `mtp_num_hidden_layers` = 1 as every Qwen3.5 ships).
pub struct Mtp<B: Backend> {
    /// `fc` split by input columns: [0, H) multiplies the normed embedding, [H, 2H) the normed hidden.
    fc_embed: B::Matrix,
    fc_hidden: B::Matrix,
    pre_embed_norm: B::Vector,
    pre_hidden_norm: B::Vector,
    input_norm: B::Vector,
    post_norm: B::Vector,
    q: B::Matrix,
    k: B::Matrix,
    v: B::Matrix,
    o: B::Matrix,
    attn: AttnParams<B>,
    gate: B::Matrix,
    up: B::Matrix,
    down: B::Matrix,
    final_norm: B::Vector,
}

/// One stream's MTP state: the head's own KV rows and the position its next committed row takes.
pub struct MtpSlot<B: Backend> {
    pub kv: B::KvState,
    /// Position of the next row to commit; None until the first keep (a resumed stream starts mid-sequence).
    pub next_pos: Option<usize>,
}

/// What an MTP forward hands back for the rows asked for: logits `[n, vocab]` and the final-normed outputs
/// `[n, hidden]` (the `h` of the next chained step), both on the host.
pub struct MtpOut {
    pub logits: Vec<f32>,
    pub hidden: Vec<f32>,
}

/// Columns [from, to) of a stored matrix, in the same format (an MLX matrix must split on a group boundary).
fn split_columns(m: &StoredMatrix, from: usize, to: usize) -> Result<StoredMatrix> {
    let bad = |msg: String| CoreError::Invalid(format!("mtp.fc: {msg}"));
    let slice_rows = |data: &[u8], rows: usize, row_bytes: usize, a: usize, b: usize| -> Bytes {
        let mut out = Vec::with_capacity(rows * (b - a));
        for r in 0..rows {
            out.extend_from_slice(&data[r * row_bytes + a..r * row_bytes + b]);
        }
        Bytes::from_vec(out)
    };
    Ok(match m {
        StoredMatrix::Dense {
            dtype,
            data,
            rows,
            cols,
        } => {
            let s = dtype.size();
            StoredMatrix::Dense {
                dtype: *dtype,
                data: slice_rows(data, *rows, cols * s, from * s, to * s),
                rows: *rows,
                cols: to - from,
            }
        }
        StoredMatrix::Affine {
            bits,
            group_size,
            codes,
            scales,
            biases,
            scale_dtype,
            rows,
            cols,
        } => {
            let gs = *group_size;
            if !from.is_multiple_of(gs)
                || !to.is_multiple_of(gs)
                || !(from * *bits as usize).is_multiple_of(32)
            {
                return Err(bad(format!(
                    "cannot split columns {from}..{to} of a {bits}-bit group-{gs} matrix"
                )));
            }
            let word_bits = *bits as usize;
            let code_row = cols * word_bits / 8;
            let s = scale_dtype.size();
            let group_row = cols / gs * s;
            let (g0, g1) = (from / gs * s, to / gs * s);
            StoredMatrix::Affine {
                bits: *bits,
                group_size: gs,
                codes: slice_rows(
                    codes,
                    *rows,
                    code_row,
                    from * word_bits / 8,
                    to * word_bits / 8,
                ),
                scales: slice_rows(scales, *rows, group_row, g0, g1),
                biases: slice_rows(biases, *rows, group_row, g0, g1),
                scale_dtype: *scale_dtype,
                rows: *rows,
                cols: to - from,
            }
        }
    })
}

/// Host rows `[n, cols]` as backend activations, through the ops every backend has (a matrix and its rows).
pub fn upload<B: Backend>(be: &B, data: &[f32], cols: usize) -> Result<B::Act> {
    let rows = data.len() / cols.max(1);
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let m = StoredMatrix::Dense {
        dtype: DenseDType::F32,
        data: Bytes::from_vec(bytes),
        rows,
        cols,
    };
    let ids: Vec<u32> = (0..rows as u32).collect();
    Ok(be.embed(&be.matrix(&m)?, &ids))
}

impl<B: Backend> Mtp<B> {
    /// Binds `mtp.*` when the checkpoint has it (None otherwise), with the target's attention shapes.
    pub fn load(ck: &Checkpoint, backend: &B, spec: AttnSpec) -> Result<Option<Self>> {
        if !ck.has("mtp.fc.weight") && !ck.has("mtp.fc.scales") {
            return Ok(None);
        }
        let c = &ck.config;
        let h = c.hidden_size;
        let mat = |name: &str, rows: usize, cols: usize| -> Result<B::Matrix> {
            backend.matrix(&ck.matrix(name, rows, cols)?)
        };
        // Zero-centred norms like the target's: HF stores w (applied as 1+w), MLX conversions store 1+w.
        let shifted = |name: &str, len: usize| -> Result<B::Vector> {
            let mut w = ck.vector(name, len)?;
            if !ck.mlx_layout {
                w.iter_mut().for_each(|x| *x += 1.0);
            }
            backend.vector(&w)
        };
        let fc = ck.matrix("mtp.fc", h, 2 * h)?;
        let l = "mtp.layers.0";
        let i_size = c.intermediate_size;
        Ok(Some(Mtp {
            fc_embed: backend.matrix(&split_columns(&fc, 0, h)?)?,
            fc_hidden: backend.matrix(&split_columns(&fc, h, 2 * h)?)?,
            pre_embed_norm: shifted("mtp.pre_fc_norm_embedding.weight", h)?,
            pre_hidden_norm: shifted("mtp.pre_fc_norm_hidden.weight", h)?,
            input_norm: shifted(&format!("{l}.input_layernorm.weight"), h)?,
            post_norm: shifted(&format!("{l}.post_attention_layernorm.weight"), h)?,
            q: mat(
                &format!("{l}.self_attn.q_proj"),
                spec.heads * spec.head_dim * 2,
                h,
            )?,
            k: mat(
                &format!("{l}.self_attn.k_proj"),
                spec.kv_heads * spec.head_dim,
                h,
            )?,
            v: mat(
                &format!("{l}.self_attn.v_proj"),
                spec.kv_heads * spec.head_dim,
                h,
            )?,
            o: mat(
                &format!("{l}.self_attn.o_proj"),
                h,
                spec.heads * spec.head_dim,
            )?,
            attn: AttnParams {
                spec,
                q_norm: shifted(&format!("{l}.self_attn.q_norm.weight"), spec.head_dim)?,
                k_norm: shifted(&format!("{l}.self_attn.k_norm.weight"), spec.head_dim)?,
                eps: c.rms_norm_eps,
            },
            gate: mat(&format!("{l}.mlp.gate_proj"), i_size, h)?,
            up: mat(&format!("{l}.mlp.up_proj"), i_size, h)?,
            down: mat(&format!("{l}.mlp.down_proj"), h, i_size)?,
            final_norm: shifted("mtp.norm.weight", h)?,
        }))
    }

    pub fn new_slot(&self, be: &B) -> MtpSlot<B> {
        MtpSlot {
            kv: be.new_kv_state(&self.attn.spec),
            next_pos: None,
        }
    }

    /// One MTP round: row `i` pairs the target hidden `hidden[i]` (host, final-normed, `[rows, H]`) at position
    /// `rows[i].pos` with the token that follows it, `tokens[i]`. Rows chain or branch per slot exactly as
    /// target rows do and stay pending until `keep`. Returns logits and outputs of the rows in `out_rows`.
    pub fn forward(
        &self,
        target: &Qwen35<B>,
        rows: &[RowRef],
        tokens: &[u32],
        hidden: &[f32],
        slots: &mut [&mut MtpSlot<B>],
        out_rows: &[usize],
    ) -> Result<MtpOut> {
        let (logits, hidden) =
            self.forward_logits(target, rows, tokens, hidden, slots, out_rows)?;
        Ok(MtpOut {
            logits: logits.into_host(),
            hidden,
        })
    }

    /// `forward` with the logits left on the backend (draw the drafts there; a GPU then reads back tokens and a
    /// few ranks, not a vocabulary of floats a row) and the outputs on the host.
    pub fn forward_logits<'a>(
        &self,
        target: &'a Qwen35<B>,
        rows: &[RowRef],
        tokens: &[u32],
        hidden: &[f32],
        slots: &mut [&mut MtpSlot<B>],
        out_rows: &[usize],
    ) -> Result<(Logits<'a, B>, Vec<f32>)> {
        let be = &target.backend;
        let c = &target.config;
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        self.check(rows, tokens, hidden.len(), h, slots, out_rows, c.vocab_size)?;
        let e = be.rms_norm(&be.embed(&target.embed, tokens), &self.pre_embed_norm, eps);
        let hh = be.rms_norm(&upload(be, hidden, h)?, &self.pre_hidden_norm, eps);
        let mut u = be.project(&e, &self.fc_embed);
        be.add_assign(&mut u, &be.project(&hh, &self.fc_hidden));
        let a = be.rms_norm(&u, &self.input_norm, eps);
        let mut kv: Vec<&mut B::KvState> = slots.iter_mut().map(|s| &mut s.kv).collect();
        let p = be.project_many(&a, &[&self.q, &self.k, &self.v]);
        let y = be.gated_attention(&self.attn, &p[0], &p[1], &p[2], rows, &mut kv);
        be.add_assign(&mut u, &be.project(&y, &self.o));
        let m = be.rms_norm(&u, &self.post_norm, eps);
        let (gate, up) = be.project_pair(&m, &self.gate, &self.up);
        let act = be.swiglu(&gate, &up);
        be.add_assign(&mut u, &be.project(&act, &self.down));
        if out_rows.is_empty() {
            return Ok((Logits::new(be, None, c.vocab_size), Vec::new()));
        }
        let d = be.rms_norm(&be.select_rows(&u, out_rows), &self.final_norm, eps);
        let logits = Logits::new(be, Some(be.project(&d, &target.lm_head)), c.vocab_size);
        Ok((logits, be.to_host(&d)))
    }

    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        rows: &[RowRef],
        tokens: &[u32],
        hidden_len: usize,
        h: usize,
        slots: &[&mut MtpSlot<B>],
        out_rows: &[usize],
        vocab: usize,
    ) -> Result<()> {
        let bad = |m: String| Err(CoreError::Invalid(format!("mtp round: {m}")));
        if rows.len() != tokens.len() || hidden_len != rows.len() * h {
            return bad(format!(
                "{} rows, {} tokens, {} hidden values (hidden size {h})",
                rows.len(),
                tokens.len(),
                hidden_len
            ));
        }
        for (i, (r, &t)) in rows.iter().zip(tokens).enumerate() {
            if r.slot >= slots.len() {
                return bad(format!("row {i} names slot {} of {}", r.slot, slots.len()));
            }
            let expected = match r.parent {
                None => slots[r.slot].next_pos.unwrap_or(r.pos),
                Some(p) if p < i && rows[p].slot == r.slot => rows[p].pos + 1,
                Some(p) => return bad(format!("row {i}'s parent {p} is not an earlier row")),
            };
            if r.pos != expected {
                return bad(format!("row {i} {r:?} must sit at position {expected}"));
            }
            if t as usize >= vocab {
                return bad(format!("token id {t} is outside the vocabulary ({vocab})"));
            }
        }
        if let Some(&b) = out_rows.iter().find(|&&i| i >= rows.len()) {
            return bad(format!("output row {b} of {} rows", rows.len()));
        }
        Ok(())
    }

    /// Commits the rows on `path` (round rows of this slot's last MTP round, root first) to the head's KV.
    pub fn keep(
        &self,
        be: &B,
        slot: &mut MtpSlot<B>,
        path: &[usize],
        first_pos: usize,
    ) -> Result<()> {
        be.keep_kv(&mut slot.kv, path)?;
        if !path.is_empty() {
            slot.next_pos = Some(first_pos + path.len());
        }
        Ok(())
    }
}
