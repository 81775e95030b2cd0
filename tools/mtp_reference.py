#!/usr/bin/env python3
"""Float64 reference for the Qwen3.5 MTP drafter head on a committed fixture (default: tiny-wrapper-bf16).

The formulation is vLLM's `qwen3_5_mtp.py` (qwen35.md §3.7): for a target row t with final-normed hidden h_t and the
next token x_{t+1},

    e  = RMSNorm0(embed_tokens[x_{t+1}], mtp.pre_fc_norm_embedding)
    hh = RMSNorm0(h_t, mtp.pre_fc_norm_hidden)
    u  = mtp.fc @ concat(e, hh)                      # embedding first
    u  = full-attention decoder layer mtp.layers.0    # own KV, RoPE at position t (vLLM pairs h_t, x_{t+1} at t)
    d  = RMSNorm0(u, mtp.norm);  logits = lm_head(d)  # chained drafting feeds d back as the next h

Everything is float64 on the stored weights. The head is computed twice, by an explicit numpy decode loop and by
transformers' own `Qwen3_5DecoderLayer` (full attention, eager) under the float64 patch of make_fixtures.py; the
two must agree to 1e-9. The target hiddens come from transformers' Qwen3_5 text model (float64), cross-checked
against the fixture's committed reference logits.

Written to `<fixture>/mtp_reference.safetensors`:
- `prompt_ids` I64 [T], `next_ids` I64 [T] (x_{t+1}: the prompt shifted, then the first greedy token),
  `hidden` F64 [T, H] (target final-normed hiddens), `logits` F64 [T, V] (MTP logits of each prompt row, the MTP KV
  filled by the rows before it);
- `chain_ids` I64 [C], `chain_logits` F64 [C, V]: C chained steps after the prompt rows, step i at position T+i
  with hidden = d of the previous row and token chain_ids[i];
- `lone_hidden` F64 [R, H] (random values exactly representable in f32), `lone_ids` I64 [R], `lone_start` I64 [1],
  `lone_logits` F64 [R, V]: a chain of R rows into an empty MTP KV starting at position lone_start.

Run:  tools/.venv/bin/python tools/mtp_reference.py [--fixture NAME]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (the fixture builder's float64 loaders and patches)

ROOT = Path(__file__).resolve().parent.parent


def mtp_weights_f64(d: Path) -> dict[str, np.ndarray]:
    raw = mf.read_raw(d)
    out = {}
    for k, v in raw.items():
        if k.startswith("mtp.") or k.startswith("model.mtp."):
            out[k[k.index("mtp."):]] = v.to(torch.float64).numpy()
    if not out:
        raise SystemExit(f"{d}: no mtp.* tensors")
    return out


class NumpyMtp:
    """The MTP head as an explicit float64 decode loop: one row at a time, keys and values appended."""

    def __init__(self, w: dict[str, np.ndarray], embed: np.ndarray, head: np.ndarray, tc):
        self.w, self.embed, self.head, self.tc = w, embed, head, tc
        self.eps = tc.rms_norm_eps
        self.nh, self.nkv, self.hd = tc.num_attention_heads, tc.num_key_value_heads, tc.head_dim
        self.rot = int(self.hd * tc.rope_parameters["partial_rotary_factor"])
        self.theta = tc.rope_parameters["rope_theta"]
        self.keys: list[np.ndarray] = []
        self.values: list[np.ndarray] = []

    def rms0(self, x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * (1.0 + w)

    def rope(self, x, pos):  # x [heads, hd], NeoX rotate-half on the first `rot` dims
        h2 = self.rot // 2
        inv = 1.0 / self.theta ** (np.arange(0, self.rot, 2, dtype=np.float64) / self.rot)
        c, s = np.cos(pos * inv), np.sin(pos * inv)
        x1, x2 = x[:, :h2], x[:, h2:self.rot]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, x[:, self.rot:]], -1)

    def step(self, hidden: np.ndarray, token: int, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """One row: returns (d, logits) and appends the row's key and value."""
        w, L = self.w, "mtp.layers.0."
        e = self.rms0(self.embed[token], w["mtp.pre_fc_norm_embedding.weight"])
        hh = self.rms0(hidden, w["mtp.pre_fc_norm_hidden.weight"])
        u = w["mtp.fc.weight"] @ np.concatenate([e, hh])
        a = self.rms0(u, w[L + "input_layernorm.weight"])
        qg = (w[L + "self_attn.q_proj.weight"] @ a).reshape(self.nh, 2 * self.hd)
        q, gate = qg[:, :self.hd], qg[:, self.hd:]
        k = (w[L + "self_attn.k_proj.weight"] @ a).reshape(self.nkv, self.hd)
        v = (w[L + "self_attn.v_proj.weight"] @ a).reshape(self.nkv, self.hd)
        q = self.rope(self.rms0(q, w[L + "self_attn.q_norm.weight"]), pos)
        k = self.rope(self.rms0(k, w[L + "self_attn.k_norm.weight"]), pos)
        self.keys.append(k)
        self.values.append(v)
        K, V = np.stack(self.keys), np.stack(self.values)  # [n, nkv, hd]
        group = self.nh // self.nkv
        o = np.zeros((self.nh, self.hd))
        for h in range(self.nh):
            s = K[:, h // group] @ q[h] / np.sqrt(self.hd)
            p = np.exp(s - s.max())
            o[h] = (p / p.sum()) @ V[:, h // group]
        o = o.reshape(-1) * (1.0 / (1.0 + np.exp(-gate.reshape(-1))))
        u = u + w[L + "self_attn.o_proj.weight"] @ o
        m = self.rms0(u, w[L + "post_attention_layernorm.weight"])
        g, up = w[L + "mlp.gate_proj.weight"] @ m, w[L + "mlp.up_proj.weight"] @ m
        u = u + w[L + "mlp.down_proj.weight"] @ (g / (1.0 + np.exp(-g)) * up)
        dd = self.rms0(u, w["mtp.norm.weight"])
        return dd, self.head @ dd


@torch.no_grad()
def transformers_mtp(d: Path, w: dict[str, np.ndarray], embed, head, hidden, ids, positions):
    """The same head through transformers' Qwen3_5DecoderLayer (full attention) over the whole causal sequence."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5TextRotaryEmbedding

    tc = mf.text_config_from_dir(d)
    full = tc.layer_types.index(mf.FULL)
    layer = Qwen3_5DecoderLayer(tc, full).to(torch.float64).eval()
    sd = {k[len("mtp.layers.0."):]: torch.from_numpy(v) for k, v in w.items() if k.startswith("mtp.layers.0.")}
    layer.load_state_dict(sd, strict=True)  # every layer tensor, nothing else
    rot = Qwen3_5TextRotaryEmbedding(tc)
    dim = int(tc.head_dim * tc.rope_parameters["partial_rotary_factor"])
    rot.inv_freq = 1.0 / (tc.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    t = torch.float64

    def rms0(x, wt):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + tc.rms_norm_eps) * (1.0 + wt)

    W = {k: torch.from_numpy(v) for k, v in w.items()}
    e = rms0(torch.from_numpy(embed)[torch.tensor(ids)], W["mtp.pre_fc_norm_embedding.weight"])
    hh = rms0(torch.from_numpy(hidden), W["mtp.pre_fc_norm_hidden.weight"])
    u = torch.cat([e, hh], -1) @ W["mtp.fc.weight"].T
    n = len(ids)
    mask = torch.full((n, n), float("-inf"), dtype=t).triu(1)[None, None]
    pos = torch.tensor([positions], dtype=torch.long)
    with mf.f64_everywhere():
        pe = rot(u[None], pos)
        out = layer(u[None], position_embeddings=pe, attention_mask=mask, position_ids=pos)[0]
    dd = rms0(out, W["mtp.norm.weight"])
    return (dd @ torch.from_numpy(head).T).numpy()


@torch.no_grad()
def target_hidden(d: Path, prompt: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Final-normed hiddens of the target over the prompt (float64 transformers) and their logits."""
    sd = mf.load_hf_text_f64(d)
    model, _ = mf.hf_model_f64(d, sd)
    with mf.f64_everywhere():
        h = model.model(input_ids=torch.tensor([prompt]), use_cache=False).last_hidden_state[0]
    logits = h @ model.lm_head.weight.T
    return h.numpy(), logits.numpy()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixture", default="tiny-wrapper-bf16")
    ap.add_argument("--chain", type=int, default=3)
    ap.add_argument("--lone", type=int, default=5)
    args = ap.parse_args()
    d = ROOT / "fixtures" / args.fixture
    from safetensors.numpy import load_file, save_file

    ref = load_file(str(d / "reference.safetensors"))
    prompt = [int(x) for x in ref["prompt_ids"]]
    greedy = [int(x) for x in ref["greedy_ids"]]
    tc = mf.text_config_from_dir(d)
    sd = mf.load_hf_text_f64(d)
    embed = sd["model.embed_tokens.weight"].numpy()
    head = embed if tc.tie_word_embeddings else sd["lm_head.weight"].numpy()
    w = mtp_weights_f64(d)

    hidden, tlogits = target_hidden(d, prompt)
    err = np.abs(tlogits - ref["logits"]).max()
    print(f"target hiddens: logits vs committed reference max diff {err:.2e}")
    assert err < 1e-9, err

    T = len(prompt)
    next_ids = prompt[1:] + [greedy[0]]
    chain_ids = greedy[1:1 + args.chain]
    mtp = NumpyMtp(w, embed, head, tc)
    rows_d, logits = [], []
    for t in range(T):
        dd, lg = mtp.step(hidden[t], next_ids[t], t)
        rows_d.append(dd)
        logits.append(lg)
    chain_logits, chain_hidden = [], []
    h = rows_d[-1]
    for i, tok in enumerate(chain_ids):
        chain_hidden.append(h)
        h, lg = mtp.step(h, tok, T + i)
        chain_logits.append(lg)

    # Cross-check: transformers' decoder layer over the prompt rows and the chain rows as one causal sequence.
    seq_hidden = np.concatenate([hidden, np.stack(chain_hidden)], 0)
    tf = transformers_mtp(d, w, embed, head, seq_hidden, next_ids + chain_ids, list(range(T + len(chain_ids))))
    mine = np.concatenate([np.stack(logits), np.stack(chain_logits)], 0)
    err = np.abs(tf - mine).max()
    print(f"numpy loop vs transformers decoder layer: max logit diff {err:.2e}")
    assert err < 1e-9, err

    # A lone chain into an empty MTP KV at a later position, from f32-exact random hiddens.
    rng = np.random.default_rng(6)
    lone_hidden = rng.normal(0.0, 1.0, size=(args.lone, tc.hidden_size)).astype(np.float32).astype(np.float64)
    lone_ids = [int(x) for x in rng.integers(0, 480, size=args.lone)]
    lone_start = 7
    lone = NumpyMtp(w, embed, head, tc)
    lone_logits = [lone.step(lone_hidden[i], lone_ids[i], lone_start + i)[1] for i in range(args.lone)]
    tf = transformers_mtp(d, w, embed, head, lone_hidden, lone_ids, list(range(lone_start, lone_start + args.lone)))
    err = np.abs(tf - np.stack(lone_logits)).max()
    print(f"lone chain: numpy vs transformers max logit diff {err:.2e}")
    assert err < 1e-9, err

    i64 = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
    out = {
        "prompt_ids": i64(prompt),
        "next_ids": i64(next_ids),
        "hidden": np.ascontiguousarray(hidden),
        "logits": np.stack(logits),
        "chain_ids": i64(chain_ids),
        "chain_logits": np.stack(chain_logits),
        "lone_hidden": lone_hidden,
        "lone_ids": i64(lone_ids),
        "lone_start": i64([lone_start]),
        "lone_logits": np.stack(lone_logits),
    }
    path = d / "mtp_reference.safetensors"
    save_file(out, str(path), metadata={"generator": "tools/mtp_reference.py", "formulation": "vLLM qwen3_5_mtp"})
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
