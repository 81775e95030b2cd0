//! The Qwen3.5 dense hybrid decoder (Gated DeltaNet + gated attention) over a round of rows: weights bound from
//! a checkpoint in their stored format, and the per-slot state (KV rows, conv tails, recurrent states).

use crate::Logits;
use tensorfold_backend::{AttnParams, AttnSpec, Backend, LinearParams, LinearSpec, RowRef};
use tensorfold_core::{Checkpoint, CoreError, LayerKind, ModelConfig, Result};

struct Mlp<B: Backend> {
    gate: B::Matrix,
    up: B::Matrix,
    down: B::Matrix,
}

struct LinearLayer<B: Backend> {
    qkv: B::Matrix,
    z: B::Matrix,
    b: B::Matrix,
    a: B::Matrix,
    out: B::Matrix,
    params: LinearParams<B>,
}

struct AttnLayer<B: Backend> {
    q: B::Matrix,
    k: B::Matrix,
    v: B::Matrix,
    o: B::Matrix,
    params: AttnParams<B>,
}

enum Mixer<B: Backend> {
    Linear(LinearLayer<B>),
    Attn(AttnLayer<B>),
}

struct Layer<B: Backend> {
    input_norm: B::Vector,
    post_norm: B::Vector,
    mixer: Mixer<B>,
    mlp: Mlp<B>,
}

/// One slot's state across all layers.
pub enum LayerState<B: Backend> {
    Linear(B::LinearState),
    Attn(B::KvState),
}

impl<B: Backend> LayerState<B> {
    /// This layer's DeltaNet state (slot states are built from the model's own layer list).
    fn linear(&mut self) -> &mut B::LinearState {
        match self {
            LayerState::Linear(x) => x,
            LayerState::Attn(_) => unreachable!("slot state built from the same layer list"),
        }
    }
    /// This layer's KV state.
    fn kv(&mut self) -> &mut B::KvState {
        match self {
            LayerState::Attn(x) => x,
            LayerState::Linear(_) => unreachable!("slot state built from the same layer list"),
        }
    }
}

pub struct SlotState<B: Backend> {
    pub layers: Vec<LayerState<B>>,
    /// Committed rows (= the absolute position of the next row).
    pub len: usize,
}

/// A bound Qwen3.5 model on backend B.
pub struct Qwen35<B: Backend> {
    pub config: ModelConfig,
    pub backend: B,
    pub(crate) embed: B::Matrix,
    pub(crate) lm_head: B::Matrix,
    final_norm: B::Vector,
    layers: Vec<Layer<B>>,
    linear_spec: LinearSpec,
    attn_spec: AttnSpec,
    /// Bytes of weights read per decode row (for bandwidth ratios).
    pub weight_bytes_per_row: usize,
    /// Storage label of the projections, e.g. "BF16" or "MLX 4-bit g64".
    pub format: String,
    /// The checkpoint's multi-token-prediction head (`mtp.*`), when it has one.
    pub mtp: Option<crate::mtp::Mtp<B>>,
}

impl<B: Backend> Qwen35<B> {
    /// Binds every text tensor of `ck`, checking names and shapes; MLX layouts are undone here.
    pub fn load(ck: &Checkpoint, backend: B) -> Result<Self> {
        let c = &ck.config;
        let h = c.hidden_size;
        let linear_spec = LinearSpec {
            key_heads: c.linear_num_key_heads,
            value_heads: c.linear_num_value_heads,
            key_dim: c.linear_key_head_dim,
            value_dim: c.linear_value_head_dim,
            conv_kernel: c.conv_kernel,
        };
        let attn_spec = AttnSpec {
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            rotary_dim: c.rotary_dim,
            rope_theta: c.rope_theta,
        };
        let mut bytes = 0usize;
        let mut formats = std::collections::BTreeSet::new();
        let mut mat = |name: &str, rows: usize, cols: usize| -> Result<B::Matrix> {
            let m = ck.matrix(name, rows, cols)?;
            bytes += m.view().stored_bytes();
            formats.insert(m.format_label());
            backend.matrix(&m)
        };
        // Zero-centred norms: HF stores w (applied as 1+w); MLX conversions store 1+w already.
        let shifted = |name: &str, len: usize| -> Result<B::Vector> {
            let mut w = ck.vector(name, len)?;
            if !ck.mlx_layout {
                w.iter_mut().for_each(|x| *x += 1.0);
            }
            backend.vector(&w)
        };
        let plain = |name: &str, len: usize| -> Result<B::Vector> {
            backend.vector(&ck.vector(name, len)?)
        };

        let mut layers = Vec::with_capacity(c.num_layers());
        for (i, kind) in c.layer_types.iter().enumerate() {
            let p = format!("layers.{i}");
            let mixer = match kind {
                LayerKind::Linear => {
                    let s = linear_spec;
                    let value_dim = s.value_heads * s.value_dim;
                    let channels = s.conv_channels();
                    let l = format!("{p}.linear_attn");
                    LinearLayer {
                        qkv: mat(&format!("{l}.in_proj_qkv"), channels, h)?,
                        z: mat(&format!("{l}.in_proj_z"), value_dim, h)?,
                        b: mat(&format!("{l}.in_proj_b"), s.value_heads, h)?,
                        a: mat(&format!("{l}.in_proj_a"), s.value_heads, h)?,
                        out: mat(&format!("{l}.out_proj"), h, value_dim)?,
                        params: LinearParams {
                            spec: s,
                            // [C,1,K] (HF) and [C,K,1] (MLX) flatten to the same c·K + j order.
                            conv: plain(&format!("{l}.conv1d.weight"), channels * s.conv_kernel)?,
                            a_log: plain(&format!("{l}.A_log"), s.value_heads)?,
                            dt_bias: plain(&format!("{l}.dt_bias"), s.value_heads)?,
                            norm: plain(&format!("{l}.norm.weight"), s.value_dim)?,
                            eps: c.rms_norm_eps,
                        },
                    }
                    .into_mixer()
                }
                LayerKind::Full => {
                    let s = attn_spec;
                    let l = format!("{p}.self_attn");
                    Mixer::Attn(AttnLayer {
                        q: mat(&format!("{l}.q_proj"), s.heads * s.head_dim * 2, h)?,
                        k: mat(&format!("{l}.k_proj"), s.kv_heads * s.head_dim, h)?,
                        v: mat(&format!("{l}.v_proj"), s.kv_heads * s.head_dim, h)?,
                        o: mat(&format!("{l}.o_proj"), h, s.heads * s.head_dim)?,
                        params: AttnParams {
                            spec: s,
                            q_norm: shifted(&format!("{l}.q_norm.weight"), s.head_dim)?,
                            k_norm: shifted(&format!("{l}.k_norm.weight"), s.head_dim)?,
                            eps: c.rms_norm_eps,
                        },
                    })
                }
            };
            let i_size = c.intermediate_size;
            layers.push(Layer {
                input_norm: shifted(&format!("{p}.input_layernorm.weight"), h)?,
                post_norm: shifted(&format!("{p}.post_attention_layernorm.weight"), h)?,
                mixer,
                mlp: Mlp {
                    gate: mat(&format!("{p}.mlp.gate_proj"), i_size, h)?,
                    up: mat(&format!("{p}.mlp.up_proj"), i_size, h)?,
                    down: mat(&format!("{p}.mlp.down_proj"), h, i_size)?,
                },
            });
        }
        let embed_stored = ck.matrix("embed_tokens", c.vocab_size, h)?;
        let head_stored = if ck.has("lm_head.weight") {
            ck.matrix("lm_head", c.vocab_size, h)?
        } else if c.tie_word_embeddings {
            embed_stored.clone()
        } else {
            return Err(CoreError::tensor(
                &ck.dir,
                "lm_head.weight",
                "missing and tie_word_embeddings is false",
            ));
        };
        bytes += head_stored.view().stored_bytes();
        formats.insert(head_stored.format_label());
        let final_norm = shifted("norm.weight", h)?;
        let mtp = crate::mtp::Mtp::load(ck, &backend, attn_spec)?;
        Ok(Qwen35 {
            config: c.clone(),
            embed: backend.matrix(&embed_stored)?,
            lm_head: backend.matrix(&head_stored)?,
            final_norm,
            layers,
            linear_spec,
            attn_spec,
            weight_bytes_per_row: bytes,
            format: formats.into_iter().collect::<Vec<_>>().join("+"),
            mtp,
            backend,
        })
    }

    pub fn new_slot(&self) -> SlotState<B> {
        let layers = self
            .layers
            .iter()
            .map(|l| match l.mixer {
                Mixer::Linear(_) => {
                    LayerState::Linear(self.backend.new_linear_state(&self.linear_spec))
                }
                Mixer::Attn(_) => LayerState::Attn(self.backend.new_kv_state(&self.attn_spec)),
            })
            .collect();
        SlotState { layers, len: 0 }
    }

    /// Runs one round without committing it: `rows[i]` carries `tokens[i]` (see `RowRef` for the chain/tree
    /// rules). Returns the logits of the rows named in `logit_rows` (row-major `[logit_rows.len(), vocab]`).
    /// Each slot's rows stay pending until `keep`; a slot's next round forgets whatever was not kept.
    pub fn forward(
        &self,
        rows: &[RowRef],
        tokens: &[u32],
        slots: &mut [&mut SlotState<B>],
        logit_rows: &[usize],
    ) -> Result<Vec<f32>> {
        Ok(self.forward_taps(rows, tokens, slots, logit_rows, &[])?.0)
    }

    /// `forward`, also returning the taps: the final-normed hidden of each row in `tap_rows` (host,
    /// `[tap_rows.len(), hidden]`), bit-equal to what that row's logits were computed from (the MTP head's input).
    pub fn forward_taps(
        &self,
        rows: &[RowRef],
        tokens: &[u32],
        slots: &mut [&mut SlotState<B>],
        logit_rows: &[usize],
        tap_rows: &[usize],
    ) -> Result<(Vec<f32>, Vec<f32>)> {
        let (logits, taps) = self.forward_round(rows, tokens, slots, logit_rows, tap_rows)?;
        Ok((logits.into_host(), taps))
    }

    /// `forward_taps` with the logits left on the backend (read rows or draw tokens from them).
    pub fn forward_round(
        &self,
        rows: &[RowRef],
        tokens: &[u32],
        slots: &mut [&mut SlotState<B>],
        logit_rows: &[usize],
        tap_rows: &[usize],
    ) -> Result<(Logits<'_, B>, Vec<f32>)> {
        self.check_round(rows, tokens, slots, logit_rows)?;
        if let Some(&b) = tap_rows.iter().find(|&&i| i >= rows.len()) {
            return Err(CoreError::Invalid(format!(
                "tap row {b} of {} rows",
                rows.len()
            )));
        }
        let be = &self.backend;
        let eps = self.config.rms_norm_eps;
        let mut h = be.embed(&self.embed, tokens);
        // The MLP output of the layer before, added to h as the next layer norms it (add_rms_norm).
        let mut pending: Option<B::Act> = None;
        for (li, layer) in self.layers.iter().enumerate() {
            let u = match pending.take() {
                Some(d) => be.add_rms_norm(&mut h, &d, &layer.input_norm, eps),
                None => be.rms_norm(&h, &layer.input_norm, eps),
            };
            let mixed = match &layer.mixer {
                Mixer::Linear(l) => {
                    let mut st: Vec<&mut B::LinearState> =
                        slots.iter_mut().map(|s| s.layers[li].linear()).collect();
                    let p = be.project_many(&u, &[&l.qkv, &l.z, &l.b, &l.a]);
                    let y = be.gated_deltanet(&l.params, &p[0], &p[1], &p[2], &p[3], rows, &mut st);
                    be.project(&y, &l.out)
                }
                Mixer::Attn(l) => {
                    let mut st: Vec<&mut B::KvState> =
                        slots.iter_mut().map(|s| s.layers[li].kv()).collect();
                    let p = be.project_many(&u, &[&l.q, &l.k, &l.v]);
                    let y = be.gated_attention(&l.params, &p[0], &p[1], &p[2], rows, &mut st);
                    be.project(&y, &l.o)
                }
            };
            let u = be.add_rms_norm(&mut h, &mixed, &layer.post_norm, eps);
            let (gate, up) = be.project_pair(&u, &layer.mlp.gate, &layer.mlp.up);
            let act = be.swiglu(&gate, &up);
            pending = Some(be.project(&act, &layer.mlp.down));
        }
        if let Some(d) = pending {
            be.add_assign(&mut h, &d);
        }
        // Taps that are all logit rows (windows) are read from the rows normed for the logits anyway.
        let at: Vec<Option<usize>> = tap_rows
            .iter()
            .map(|r| logit_rows.iter().position(|l| l == r))
            .collect();
        let shared = !tap_rows.is_empty() && at.iter().all(Option::is_some);
        let mut taps = if tap_rows.is_empty() || shared {
            Vec::new()
        } else {
            be.to_host(&be.rms_norm(&be.select_rows(&h, tap_rows), &self.final_norm, eps))
        };
        let vocab = self.config.vocab_size;
        if logit_rows.is_empty() {
            return Ok((Logits::new(be, None, vocab), taps));
        }
        let picked = be.select_rows(&h, logit_rows);
        let normed = be.rms_norm(&picked, &self.final_norm, eps);
        if shared {
            let host = be.to_host(&normed);
            let width = self.config.hidden_size;
            for i in at.into_iter().flatten() {
                taps.extend_from_slice(&host[i * width..(i + 1) * width]);
            }
        }
        let logits = Logits::new(be, Some(be.project(&normed, &self.lm_head)), vocab);
        Ok((logits, taps))
    }
}

impl<B: Backend> Qwen35<B> {
    fn check_round(
        &self,
        rows: &[RowRef],
        tokens: &[u32],
        slots: &[&mut SlotState<B>],
        logit_rows: &[usize],
    ) -> Result<()> {
        let vocab = self.config.vocab_size;
        let bad = |m: String| Err(CoreError::Invalid(m));
        if rows.len() != tokens.len() {
            return bad(format!("{} rows but {} tokens", rows.len(), tokens.len()));
        }
        for (i, (r, &t)) in rows.iter().zip(tokens).enumerate() {
            if r.slot >= slots.len() {
                return bad(format!("row {i} names slot {} of {}", r.slot, slots.len()));
            }
            let expected = match r.parent {
                None => slots[r.slot].len,
                Some(p) if p < i && rows[p].slot == r.slot => rows[p].pos + 1,
                Some(p) => {
                    return bad(format!(
                        "row {i}'s parent {p} is not an earlier row of its slot"
                    ))
                }
            };
            if r.pos != expected {
                return bad(format!("row {i} {r:?} must sit at position {expected}"));
            }
            if t as usize >= vocab {
                return bad(format!("token id {t} is outside the vocabulary ({vocab})"));
            }
        }
        if let Some(&b) = logit_rows.iter().find(|&&i| i >= rows.len()) {
            return bad(format!("logit row {b} of {} rows", rows.len()));
        }
        Ok(())
    }

    /// Commits the rows on `path` (round row indices of this slot's last round, root first, each the parent of
    /// the next): KV rows appended in order, DeltaNet state and conv tail as after the last of them.
    pub fn keep(&self, slot: &mut SlotState<B>, path: &[usize]) -> Result<()> {
        self.keep_many(&mut [(slot, path)])
    }

    /// `keep` for several slots of the same round at once: every DeltaNet layer's states of every slot in one
    /// backend call, then every attention layer's (a GPU commits each call in one launch).
    pub fn keep_many(&self, slots: &mut [(&mut SlotState<B>, &[usize])]) -> Result<()> {
        let mut linear: Vec<(&mut B::LinearState, &[usize])> = Vec::new();
        let mut kv: Vec<(&mut B::KvState, &[usize])> = Vec::new();
        for (slot, path) in slots.iter_mut() {
            for st in slot.layers.iter_mut() {
                match st {
                    LayerState::Linear(s) => linear.push((s, *path)),
                    LayerState::Attn(s) => kv.push((s, *path)),
                }
            }
        }
        self.backend
            .keep_linear_many(&self.linear_spec, &mut linear)?;
        self.backend.keep_kv_many(&mut kv)?;
        for (slot, path) in slots.iter_mut() {
            slot.len += path.len();
        }
        Ok(())
    }

    /// A round whose rows are one chain per slot, all kept (prompt chunks, plain decode).
    pub fn forward_chains(
        &self,
        rows: &[RowRef],
        tokens: &[u32],
        slots: &mut [&mut SlotState<B>],
        logit_rows: &[usize],
    ) -> Result<Vec<f32>> {
        Ok(self
            .forward_chains_round(rows, tokens, slots, logit_rows)?
            .into_host())
    }

    /// `forward_chains` with the logits left on the backend.
    pub fn forward_chains_round(
        &self,
        rows: &[RowRef],
        tokens: &[u32],
        slots: &mut [&mut SlotState<B>],
        logit_rows: &[usize],
    ) -> Result<Logits<'_, B>> {
        let (logits, _) = self.forward_round(rows, tokens, slots, logit_rows, &[])?;
        let mut paths: Vec<Vec<usize>> = vec![Vec::new(); slots.len()];
        for (i, r) in rows.iter().enumerate() {
            paths[r.slot].push(i);
        }
        let mut kept: Vec<(&mut SlotState<B>, &[usize])> = slots
            .iter_mut()
            .zip(&paths)
            .filter(|(_, p)| !p.is_empty())
            .map(|(s, p)| (&mut **s, p.as_slice()))
            .collect();
        self.keep_many(&mut kept)?;
        Ok(logits)
    }

    /// Host copies of a slot's committed state (prompt cache).
    pub fn snapshot(&self, slot: &SlotState<B>) -> SlotSnapshot<B> {
        let layers = slot
            .layers
            .iter()
            .map(|l| match l {
                LayerState::Linear(s) => LayerSnapshot::Linear(self.backend.snapshot_linear(s)),
                LayerState::Attn(s) => LayerSnapshot::Attn(self.backend.snapshot_kv(s)),
            })
            .collect();
        SlotSnapshot {
            layers,
            len: slot.len,
        }
    }

    /// A slot holding exactly the snapshot's state.
    pub fn restore(&self, snap: &SlotSnapshot<B>) -> Result<SlotState<B>> {
        let mut layers = Vec::with_capacity(snap.layers.len());
        for l in &snap.layers {
            layers.push(match l {
                LayerSnapshot::Linear(s) => LayerState::Linear(self.backend.restore_linear(s)),
                LayerSnapshot::Attn(s) => {
                    LayerState::Attn(self.backend.restore_kv(&self.attn_spec, s)?)
                }
            });
        }
        Ok(SlotState {
            layers,
            len: snap.len,
        })
    }

    pub fn snapshot_bytes(&self, snap: &SlotSnapshot<B>) -> usize {
        snap.layers
            .iter()
            .map(|l| match l {
                LayerSnapshot::Linear(s) => self.backend.linear_snapshot_bytes(s),
                LayerSnapshot::Attn(s) => self.backend.kv_snapshot_bytes(s),
            })
            .sum()
    }

    /// Number of attention layers (each takes KV pages).
    pub fn attention_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|l| matches!(l.mixer, Mixer::Attn(_)))
            .count()
    }
}

/// A slot's committed state copied out (prompt cache).
pub enum LayerSnapshot<B: Backend> {
    Linear(B::LinearSnapshot),
    Attn(B::KvSnapshot),
}

pub struct SlotSnapshot<B: Backend> {
    pub layers: Vec<LayerSnapshot<B>>,
    pub len: usize,
}

impl<B: Backend> LinearLayer<B> {
    fn into_mixer(self) -> Mixer<B> {
        Mixer::Linear(self)
    }
}

impl<B: Backend> Qwen35<B> {
    pub fn backend_name(&self) -> String {
        self.backend.name()
    }
}
