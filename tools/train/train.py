#!/usr/bin/env python3
"""Train TensorFold's built-in model: a small Qwen3.5 hybrid (Gated DeltaNet + gated attention, 3:1) with an MTP
head, on the Python standard library's source (PSF licence), plus its byte-level BPE tokenizer.

Runs on the GPU machine (python3 with torch + transformers there; no network). Everything it writes goes to --out
(the device tool's $OUT): train.log, metrics.json, corpus_files.tsv, heldout.jsonl.gz, tokenizer.json and the bf16
weights split into <= 15 MB safetensors parts (the device tool returns files of at most 16 MiB). `export.py`, run
locally afterwards, assembles the published HF layout, the float64 reference and the MLX 4-bit copy.

    python3 tools/train/train.py --out $OUT                 # the real run (see README.md for the numbers)
    python3 tools/train/train.py --out $OUT --smoke         # timings + equivalence check + a 30-step run

The model is implemented here in plain torch (names and math of transformers' Qwen3_5ForCausalLM, see
shared/reference/qwen35.md), so that the chunked delta rule can use a batched triangular solve and the MTP head
(not in transformers) shares the code. `--check-hf` (on by default) asserts at start that this implementation and
transformers' Qwen3_5ForCausalLM give the same logits (float32) on the same random weights.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import math
import os
import platform
import random
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tools/: reuse the published tokenizer layout of make_tokenizer.py

LIN, FULL = "linear_attention", "full_attention"
T0 = time.time()
LOG_FH = None


def log(*a):
    s = f"[{time.time() - T0:7.1f}s] " + " ".join(str(x) for x in a)
    print(s, flush=True)
    if LOG_FH is not None:
        LOG_FH.write(s + "\n")
        LOG_FH.flush()


# ----------------------------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------------------------

MODEL_DIMS = dict(
    vocab_size=8192,
    hidden_size=256,
    intermediate_size=768,
    num_hidden_layers=8,
    layer_types=[LIN, LIN, LIN, FULL] * 2,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=4,
    linear_num_value_heads=8,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6,
    rope_theta=10000000.0,
    partial_rotary_factor=0.25,
    mrope_section=[3, 3, 2],  # 16 rotary dims -> 8 frequencies (published: [11, 11, 10] for 64 rotary dims)
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)


def text_config(d: dict, eot_id: int) -> dict:
    """text_config of the published wrapper layout (see fixtures/tiny-wrapper-bf16/config.json)."""
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "dtype": "bfloat16",
        "eos_token_id": eot_id,
        "full_attention_interval": 4,
        "head_dim": d["head_dim"],
        "hidden_act": "silu",
        "hidden_size": d["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": d["intermediate_size"],
        "layer_types": list(d["layer_types"]),
        "linear_conv_kernel_dim": d["linear_conv_kernel_dim"],
        "linear_key_head_dim": d["linear_key_head_dim"],
        "linear_num_key_heads": d["linear_num_key_heads"],
        "linear_num_value_heads": d["linear_num_value_heads"],
        "linear_value_head_dim": d["linear_value_head_dim"],
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": d["max_position_embeddings"],
        "mlp_only_layers": [],
        "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": d["num_attention_heads"],
        "num_hidden_layers": d["num_hidden_layers"],
        "num_key_value_heads": d["num_key_value_heads"],
        "pad_token_id": eot_id,
        "rms_norm_eps": d["rms_norm_eps"],
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": list(d["mrope_section"]),
            "rope_type": "default",
            "rope_theta": d["rope_theta"],
            "partial_rotary_factor": d["partial_rotary_factor"],
        },
        "tie_word_embeddings": d["tie_word_embeddings"],
        "use_cache": True,
        "vocab_size": d["vocab_size"],
    }


def wrapper_config(d: dict, eot_id: int, im_end_id: int, transformers_version: str) -> dict:
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "eos_token_id": im_end_id,
        "model_type": "qwen3_5",
        "pad_token_id": eot_id,
        "text_config": text_config(d, eot_id),
        "tie_word_embeddings": d["tie_word_embeddings"],
        "transformers_version": transformers_version,
    }


# ----------------------------------------------------------------------------------------------------------------
# Model (plain torch; parameter names = transformers' Qwen3_5ForCausalLM + the published mtp.*)
# ----------------------------------------------------------------------------------------------------------------


class RMSNorm0(nn.Module):
    """Zero-centred RMSNorm: x / rms(x) * (1 + w), in fp32."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).type_as(x)


class RMSNormGated(nn.Module):
    """linear_attn.norm: plain weight, w * norm(o) * silu(z) (transformers' rounding points)."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x, z):
        dt = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        y = self.weight * xf.to(dt)
        y = y * F.silu(z.float())
        return y.to(dt)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def chunk_gated_delta_rule(q, k, v, g, beta, chunk=64):
    """Same math as transformers' torch_chunk_gated_delta_rule (use_qk_l2norm_in_kernel=True, no initial state).
    q, k [B,T,Hk,Dk]; v [B,T,Hv,Dv]; g (log decay), beta [B,T,Hv]. Returns [B,T,Hv,Dv] in q's dtype."""
    dt = q.dtype
    B, T, Hk, Dk = k.shape
    Hv, Dv = v.shape[2], v.shape[3]
    if Hv != Hk:
        q = q.repeat_interleave(Hv // Hk, dim=2)
        k = k.repeat_interleave(Hv // Hk, dim=2)
    q, k, v, beta, g = [x.transpose(1, 2).float().contiguous() for x in (q, k, v, beta, g)]
    q = l2norm(q) * (Dk ** -0.5)
    k = l2norm(k)
    pad = (chunk - T % chunk) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        beta, g = (F.pad(x, (0, pad)) for x in (beta, g))
    N = (T + pad) // chunk
    v_beta = v * beta.unsqueeze(-1)
    k_beta = k * beta.unsqueeze(-1)
    q, k, k_beta, v_beta = (x.reshape(B, Hv, N, chunk, x.shape[-1]) for x in (q, k, k_beta, v_beta))
    gc = g.reshape(B, Hv, N, chunk).cumsum(-1)
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    decay = (gc.unsqueeze(-1) - gc.unsqueeze(-2)).masked_fill(upper, float("-inf")).exp()
    ut = (k_beta @ k.transpose(-1, -2)) * decay
    intra = (q @ k.transpose(-1, -2)) * decay
    new_v = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
    k_cum = torch.linalg.solve_triangular(ut, k_beta * gc.exp().unsqueeze(-1), upper=False, unitriangular=True)
    qd = q * gc.exp().unsqueeze(-1)
    kd = k * (gc[..., -1:] - gc).exp().unsqueeze(-1)
    cd = gc[..., -1].exp()[..., None, None]
    S = torch.zeros(B, Hv, Dk, Dv, dtype=torch.float32, device=q.device)
    outs = []
    for i in range(N):
        vn = new_v[:, :, i] - k_cum[:, :, i] @ S
        outs.append(qd[:, :, i] @ S + intra[:, :, i] @ vn)
        S = S * cd[:, :, i] + kd[:, :, i].transpose(-1, -2) @ vn
    o = torch.stack(outs, 2).reshape(B, Hv, N * chunk, Dv)[:, :, :T]
    return o.transpose(1, 2).contiguous().to(dt)


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.Hk, self.Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.Dk, self.Dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.key_dim, self.value_dim = self.Hk * self.Dk, self.Hv * self.Dv
        self.K = c["linear_conv_kernel_dim"]
        H = c["hidden_size"]
        conv_dim = 2 * self.key_dim + self.value_dim
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, self.K, groups=conv_dim, bias=False, padding=self.K - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.A_log = nn.Parameter(torch.zeros(self.Hv))
        self.norm = RMSNormGated(self.Dv, c["rms_norm_eps"])
        self.out_proj = nn.Linear(self.value_dim, H, bias=False)
        self.in_proj_qkv = nn.Linear(H, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(H, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(H, self.Hv, bias=False)
        self.in_proj_a = nn.Linear(H, self.Hv, bias=False)

    def forward(self, x, rope=None):
        B, T, _ = x.shape
        mixed = self.in_proj_qkv(x).transpose(1, 2)
        z = self.in_proj_z(x).reshape(B, T, self.Hv, self.Dv)
        b = self.in_proj_b(x)
        a = self.in_proj_a(x)
        mixed = F.silu(F.conv1d(mixed, self.conv1d.weight, None, padding=self.K - 1,
                                groups=mixed.shape[1])[:, :, :T]).transpose(1, 2)
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = q.reshape(B, T, self.Hk, self.Dk)
        k = k.reshape(B, T, self.Hk, self.Dk)
        v = v.reshape(B, T, self.Hv, self.Dv)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        o = chunk_gated_delta_rule(q, k, v, g, beta)
        o = self.norm(o.reshape(-1, self.Dv), z.reshape(-1, self.Dv)).reshape(B, T, self.value_dim)
        return self.out_proj(o)


def rope_tables(c, T, device):
    rot = int(c["head_dim"] * c["partial_rotary_factor"])
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, rot, 2, dtype=torch.float32, device=device) / rot))
    ang = torch.arange(T, dtype=torch.float32, device=device)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    """x [B,T,h,hd]; NeoX halves on the first rot dims."""
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    c, s = cos[None, :, None, :].to(x.dtype), sin[None, :, None, :].to(x.dtype)
    x1, x2 = xr[..., : rot // 2], xr[..., rot // 2:]
    rh = torch.cat([-x2, x1], -1)
    return torch.cat([xr * c + rh * s, xp], -1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, self.nh, self.nkv, self.hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = nn.Linear(H, self.nh * self.hd * 2, bias=False)
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        self.q_norm = RMSNorm0(self.hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm0(self.hd, c["rms_norm_eps"])

    def forward(self, x, rope):
        B, T, _ = x.shape
        qg = self.q_proj(x).view(B, T, self.nh, 2 * self.hd)
        q, gate = qg[..., : self.hd], qg[..., self.hd:]
        gate = gate.reshape(B, T, self.nh * self.hd)
        q = self.q_norm(q)
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd))
        v = self.v_proj(x).view(B, T, self.nkv, self.hd)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        r = self.nh // self.nkv
        k, v = k.repeat_interleave(r, dim=2), v.repeat_interleave(r, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        o = o.transpose(1, 2).reshape(B, T, self.nh * self.hd)
        return self.o_proj(o * torch.sigmoid(gate))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        if kind == LIN:
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = Attention(c)
        self.input_layernorm = RMSNorm0(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm0(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, h, rope):
        u = self.input_layernorm(h)
        u = self.linear_attn(u) if self.kind == LIN else self.self_attn(u, rope)
        h = h + u
        return h + self.mlp(self.post_attention_layernorm(h))


class Trunk(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([DecoderLayer(c, t) for t in c["layer_types"]])
        self.norm = RMSNorm0(c["hidden_size"], c["rms_norm_eps"])


class MTP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = RMSNorm0(H, c["rms_norm_eps"])
        self.pre_fc_norm_hidden = RMSNorm0(H, c["rms_norm_eps"])
        self.layers = nn.ModuleList([DecoderLayer(c, FULL)])
        self.norm = RMSNorm0(H, c["rms_norm_eps"])


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Trunk(c)
        self.mtp = MTP(c)

    def hidden(self, ids):
        """Final-normed hidden states [B,T,H] (transformers' last_hidden_state)."""
        T = ids.shape[1]
        rope = rope_tables(self.c, T, ids.device)
        h = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            h = layer(h, rope)
        return self.model.norm(h), rope

    def logits(self, h):
        return h @ self.model.embed_tokens.weight.t().to(h.dtype)

    def mtp_hidden(self, h, next_ids, rope):
        """h [B,T,H] final-normed hidden at t; next_ids [B,T] = x_{t+1}. Returns mtp.norm output (predicts t+2)."""
        e = self.mtp.pre_fc_norm_embedding(self.model.embed_tokens(next_ids))
        hh = self.mtp.pre_fc_norm_hidden(h)
        u = self.mtp.fc(torch.cat([e.to(hh.dtype), hh], -1))
        u = self.mtp.layers[0](u, rope)
        return self.mtp.norm(u)


def init_weights(m: Model, seed: int):
    g = torch.Generator().manual_seed(seed)
    n_layers = m.c["num_hidden_layers"]
    out_std = 0.02 / math.sqrt(2 * n_layers)
    for name, p in m.named_parameters():
        with torch.no_grad():
            if name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
                p.copy_(torch.randn(p.shape, generator=g) * out_std)
            elif name.endswith("conv1d.weight"):
                bound = 1.0 / math.sqrt(p.shape[-1])
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.rand(p.shape, generator=g) * 15 + 1))  # A ~ U(1, 16)
            elif name.endswith("dt_bias"):
                # FLA/Mamba init: dt ~ logU(1e-3, 1e-1), dt_bias = softplus^-1(dt)
                dt = torch.exp(torch.rand(p.shape, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
                p.copy_(dt + torch.log(-torch.expm1(-dt)))
            elif name.endswith("linear_attn.norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".weight") and "norm" in name.split(".")[-2]:
                p.zero_()  # zero-centred norms (1 + w), incl. mtp.pre_fc_norm_embedding / _hidden
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
            else:
                raise ValueError(name)


# ----------------------------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------------------------

EXCLUDE_PARTS = {"site-packages", "dist-packages", "__pycache__"}
MAX_FILE_BYTES = 400_000


def scan_corpus(roots: list[str], val_percent: int):
    """All .py files under the roots (no site-packages), UTF-8, <= MAX_FILE_BYTES, exact duplicates (same bytes)
    dropped after their first occurrence in root order. The split hashes the path relative to its root, so the same
    module of two Python versions lands on the same side."""
    files, seen = [], set()
    for root in roots:
        rootp = Path(root)
        for p in sorted(rootp.rglob("*.py")):
            rel = p.relative_to(rootp)
            if EXCLUDE_PARTS & set(rel.parts) or not p.is_file():
                continue
            raw = p.read_bytes()
            if len(raw) == 0 or len(raw) > MAX_FILE_BYTES:
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            h = hashlib.sha256(raw).hexdigest()
            if h in seen:
                continue
            seen.add(h)
            rel_s = rel.as_posix()
            split = "val" if int(hashlib.sha1(rel_s.encode()).hexdigest(), 16) % 100 < val_percent else "train"
            files.append({"path": f"{rootp.name}/{rel_s}", "sha256": h, "bytes": len(raw), "split": split,
                          "text": text})
    lst = "".join(f"{f['path']}\t{f['sha256']}\t{f['split']}\n" for f in files)
    return files, lst, hashlib.sha256(lst.encode()).hexdigest()


ASK = [
    "Write a Python function `{name}({args})`: {doc}",
    "{doc}\n\nImplement this in Python as `{name}`.",
    "How would you write `{name}` in Python? It should do this: {doc}",
    "Write `{name}` for me. {doc}",
]


def chat_examples(f: dict, rng: random.Random) -> list[str]:
    """Turn documented public functions of a training file into ChatML turns (the rendering of
    fixtures/tokenizer/chat_template.jinja for [user, assistant] with no reasoning)."""
    text = f["text"]
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc:
            continue
        first = " ".join(doc.strip().split("\n\n")[0].split())
        if not 20 <= len(first) <= 300:
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        src = textwrap.dedent("".join(lines[start:node.end_lineno])).rstrip()
        if src.count("\n") < 2 or len(src) > 2500:
            continue
        try:
            args = ast.unparse(node.args)
        except Exception:  # noqa: BLE001
            args = "..."
        q = rng.choice(ASK).format(name=node.name, args=args, doc=first)
        a = f"```python\n{src}\n```"
        out.append(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n{a}<|im_end|>\n")
    return out


def copy_documents(files: list[dict], tok, rng: random.Random, budget: int, max_doc: int) -> list[list[int]]:
    """Whole-file rewrites as training documents: `# file: NAME`, a run of the file's lines, then `# file:
    STEM_copy.py (an exact copy of NAME, line for line)` and the same lines again: the prompt format of
    `tensorfold bench --drafts` and of its `--files` rewrites. Without them the model copies poorly and a rewrite
    drifts off the file after a few lines. Runs start at the top of the file half the time, else at a random line;
    their length is uniform up to what keeps the whole document within `max_doc` tokens. Stops at `budget`
    tokens."""
    order = list(files)
    rng.shuffle(order)
    docs, total = [], 0
    for f in order * 4:
        if total >= budget:
            break
        lines = f["text"].splitlines(keepends=True)
        if len(lines) < 4:
            continue
        name = f["path"].rsplit("/", 1)[-1]
        stem = name[:-3] if name.endswith(".py") else name
        start = 0 if rng.random() < 0.5 else rng.randrange(len(lines) - 2)
        want = rng.randint(48, max(48, max_doc // 2 - 32))
        run, n = [], 0
        for line in lines[start:]:
            n += max(1, len(line) // 3)
            if n > want and run:
                break
            run.append(line)
        body = "".join(run).rstrip("\n") + "\n"
        doc = f"# file: {name}\n{body}\n# file: {stem}_copy.py (an exact copy of {name}, line for line)\n{body}"
        ids = tok.encode(doc, add_special_tokens=False).ids
        if len(ids) > max_doc:
            continue
        docs.append(ids)
        total += len(ids)
    return docs


# Qwen's split regex minus its `[\r\n]*` after punctuation. Qwen glues the line break to the `):` that opens a block,
# so a prompt that ends at `):` (every `def f(x):` prompt) ends on a token the model almost never saw there and the
# first reply token is a guess. Splitting the break off makes the prompt's last token the one seen in training.
CODE_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer(texts: list[str], vocab_total: int):
    from tokenizers import Regex, Tokenizer, pre_tokenizers, normalizers, models, trainers
    from make_tokenizer import ADDED, bytes_to_unicode, tokenizer_config, tokenizer_json

    bpe_vocab = vocab_total - len(ADDED)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CODE_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=bpe_vocab, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    byte_map = bytes_to_unicode()
    ordered = [byte_map[b] for b in range(256)]
    seen = set(ordered)
    for a, b in merges:
        if a + b not in seen:
            ordered.append(a + b)
            seen.add(a + b)
    assert set(ordered) == set(vocab), "trained vocab is not bytes + merges"
    vocab = {t: i for i, t in enumerate(ordered)}
    assert len(vocab) == bpe_vocab, (len(vocab), bpe_vocab)
    tj = tokenizer_json(vocab, merges, CODE_SPLIT_REGEX)
    tcfg = tokenizer_config(len(vocab))
    return tj, tcfg


# ----------------------------------------------------------------------------------------------------------------
# Training helpers
# ----------------------------------------------------------------------------------------------------------------


def losses(model: Model, batch: torch.Tensor, mtp_weight: float, detach_mtp: bool):
    """batch [B, T+2]. Main loss on x_{t+1}, MTP loss on x_{t+2}."""
    T = batch.shape[1] - 2
    x, y1, y2 = batch[:, :T], batch[:, 1:T + 1], batch[:, 2:T + 2]
    h, rope = model.hidden(x)
    lg = model.logits(h)
    l1 = F.cross_entropy(lg.float().view(-1, lg.shape[-1]), y1.reshape(-1))
    hm = model.mtp_hidden(h.detach() if detach_mtp else h, y1, rope)
    lg2 = model.logits(hm)
    l2 = F.cross_entropy(lg2.float().view(-1, lg2.shape[-1]), y2.reshape(-1))
    return l1 + mtp_weight * l2, l1, l2


@torch.no_grad()
def evaluate(model: Model, val: torch.Tensor, T: int, bs: int, max_windows: int, dev, amp):
    """Non-overlapping windows of T+2 tokens of the held-out stream. Returns mean main CE, MTP CE, MTP top-1
    accuracy on x_{t+2}, and the agreement of the MTP argmax with the main model's argmax at t+1 (what a
    one-token MTP draft is accepted on, teacher-forced)."""
    model.eval()
    n = min((len(val) - 2) // T, max_windows)
    idx = torch.arange(n, device=dev)[:, None] * T + torch.arange(T + 2, device=dev)[None, :]
    s1 = s2 = acc2 = agree = 0.0
    cnt = 0
    for i in range(0, n, bs):
        b = val[idx[i:i + bs]].long()
        x, y1, y2 = b[:, :T], b[:, 1:T + 1], b[:, 2:T + 2]
        with amp():
            h, rope = model.hidden(x)
            lg = model.logits(h).float()
            hm = model.mtp_hidden(h, y1, rope)
            lg2 = model.logits(hm).float()
        s1 += float(F.cross_entropy(lg.view(-1, lg.shape[-1]), y1.reshape(-1), reduction="sum"))
        s2 += float(F.cross_entropy(lg2.view(-1, lg2.shape[-1]), y2.reshape(-1), reduction="sum"))
        p2 = lg2.argmax(-1)
        acc2 += float((p2 == y2).sum())
        agree += float((p2[:, :-1] == lg.argmax(-1)[:, 1:]).sum())
        cnt += y1.numel()
    model.train()
    nb = max(1, n)
    return {"val_loss": s1 / cnt, "val_ppl": math.exp(s1 / cnt), "val_mtp_loss": s2 / cnt,
            "val_mtp_top1_acc": acc2 / cnt, "val_mtp_agree_main_argmax": agree / (cnt - nb),
            "val_tokens": cnt, "val_windows": n}


@torch.no_grad()
def greedy_sample(model: Model, tok, prompt: str, n: int, dev, amp):
    model.eval()
    ids = tok.encode(prompt).ids
    out = []
    for _ in range(n):
        x = torch.tensor([ids + out], device=dev)
        with amp():
            h, _ = model.hidden(x)
            nxt = int(model.logits(h[:, -1:]).float().argmax(-1))
        out.append(nxt)
    model.train()
    return tok.decode(out, skip_special_tokens=False)


def hf_equivalence(c: dict, eot: int, im_end: int, dev) -> dict:
    """Same random weights in this implementation and transformers' Qwen3_5ForCausalLM: max |logit diff| (f32)."""
    import tempfile
    import transformers
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    with tempfile.TemporaryDirectory() as td:
        Path(td, "config.json").write_text(json.dumps(wrapper_config(c, eot, im_end, transformers.__version__)))
        tc = Qwen3_5TextConfig.from_pretrained(td)
    tc._attn_implementation = "eager"
    ref = Qwen3_5ForCausalLM(tc).to(dev).float().eval()
    mine = Model(c).to(dev)
    init_weights(mine, 1234)
    with torch.no_grad():  # non-trivial norms so that every (1+w) path is exercised
        for n_, p in mine.named_parameters():
            if "norm" in n_.split(".")[-2]:
                p.add_(0.1 * torch.randn_like(p))
    sd = {k: v for k, v in mine.state_dict().items() if k.startswith("model.")}
    missing, unexpected = ref.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert set(missing) <= {"lm_head.weight"}, missing
    mine.eval()
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, c["vocab_size"], (2, 150), generator=g).to(dev)
    with torch.no_grad():
        a = ref(input_ids=ids, use_cache=False).logits.float()
        h, _ = mine.hidden(ids)
        b = mine.logits(h).float()
    d = float((a - b).abs().max())
    return {"max_abs_logit_diff_vs_transformers_f32": d, "logit_std": float(a.std()),
            "transformers": transformers.__version__}


def split_save(sd: dict, out: Path, prefix: str, max_bytes: int = 15_000_000) -> list[str]:
    from safetensors.torch import save_file

    parts, cur, size = [], {}, 0
    for k in sorted(sd):
        nb = sd[k].numel() * sd[k].element_size()
        if cur and size + nb > max_bytes:
            parts.append(cur)
            cur, size = {}, 0
        cur[k] = sd[k].contiguous()
        size += nb
    parts.append(cur)
    names = []
    for i, p in enumerate(parts):
        nm = f"{prefix}-{i + 1}-of-{len(parts)}.safetensors"
        save_file(p, str(out / nm), metadata={"format": "pt"})
        names.append(nm)
    return names


# ----------------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------------


def main() -> int:
    global LOG_FH
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus-root", action="append", default=None,
                    help="directory of .py files (default: this python's standard library)")
    ap.add_argument("--val-percent", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--chat-frac", type=float, default=0.12, help="max share of training tokens from chat turns")
    ap.add_argument("--copy-frac", type=float, default=0.0,
                    help="share of training tokens from whole-file rewrite documents (copy_documents; the shipped "
                         "model used none, README 'Copy documents')")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--time-budget", type=float, default=390.0, help="seconds of training before a forced stop")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.5)
    ap.add_argument("--mtp-attach", action="store_true", help="let the MTP loss reach the trunk's hidden states")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-windows", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="CPU debugging: tiny model, few files")
    ap.add_argument("--tokenizer", default=None, help="reuse this tokenizer.json instead of training one")
    ap.add_argument("--timing-only", action="store_true", help="with --smoke: stop after the step timings")
    ap.add_argument("--timing-batches", default="32,64,128")
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    LOG_FH = open(out / "train.log", "a")
    dev = torch.device(args.device)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed % (2 ** 32))
    import transformers
    import tokenizers
    from tokenizers import Tokenizer

    env = {"python": platform.python_version(), "executable": sys.executable, "torch": torch.__version__,
           "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
           "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else platform.processor(),
           "has_Qwen3_5ForCausalLM": hasattr(transformers, "Qwen3_5ForCausalLM"),
           "has_Qwen3_5TextConfig": hasattr(transformers, "Qwen3_5TextConfig")}
    log("env", json.dumps(env))

    roots = args.corpus_root or [os.path.dirname(os.__file__)]
    files, file_list, list_hash = scan_corpus(roots, args.val_percent)
    if args.tiny:
        files = files[:60]
    train_f = [f for f in files if f["split"] == "train"]
    val_f = [f for f in files if f["split"] == "val"]
    if not args.timing_only:
        (out / "corpus_files.tsv").write_text(file_list)
    corpus = {"roots": roots, "files": len(files), "train_files": len(train_f), "val_files": len(val_f),
              "train_bytes": sum(f["bytes"] for f in train_f), "val_bytes": sum(f["bytes"] for f in val_f),
              "file_list_sha256": list_hash, "val_rule": f"sha1(path relative to its root) % 100 < {args.val_percent}",
              "dedup": "exact (sha256 of bytes), first root wins",
              "licence": "PSF-2.0 (Python Software Foundation License), the CPython standard library",
              "has_test_suite": any("/test/" in f["path"] for f in files)}
    log("corpus", json.dumps(corpus))
    with gzip.open(out / "heldout.jsonl.gz" if not args.timing_only else os.devnull, "wt", encoding="utf-8") as fh:
        for f in val_f:
            fh.write(json.dumps({"path": f["path"], "sha256": f["sha256"], "text": f["text"]}) + "\n")

    # tokenizer
    t = time.time()
    if args.tokenizer:
        from make_tokenizer import tokenizer_config
        tj = json.loads(Path(args.tokenizer).read_text())
        tcfg = tokenizer_config(len(tj["model"]["vocab"]))
        tok = Tokenizer.from_file(args.tokenizer)
    else:
        tj, tcfg = train_tokenizer([f["text"] for f in train_f], args.vocab)
        (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False, separators=(",", ":")))
        tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == args.vocab
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    log(f"tokenizer trained in {time.time() - t:.1f}s; vocab {args.vocab}; eot {eot} im_end {im_end}")

    # tokens
    t = time.time()
    rng = random.Random(args.seed)
    chats = []
    for f in train_f:
        chats.extend(chat_examples(f, rng))
    chats = list(dict.fromkeys(chats))  # the same function in two Python versions once
    rng.shuffle(chats)
    enc = tok.encode_batch([f["text"] for f in train_f], add_special_tokens=False)
    code_tokens = sum(len(e.ids) for e in enc)
    enc_c = tok.encode_batch(chats, add_special_tokens=False)
    max_chat = int(args.chat_frac / (1 - args.chat_frac) * code_tokens)
    docs = [e.ids for e in enc]
    used_chat, chat_tokens = 0, 0
    for e in enc_c:
        if chat_tokens + len(e.ids) > max_chat:
            break
        docs.append(e.ids)
        chat_tokens += len(e.ids)
        used_chat += 1
    copies = copy_documents(train_f, tok, rng, int(args.copy_frac / (1 - args.copy_frac) * code_tokens),
                            args.seq - 8) if args.copy_frac > 0 else []
    docs.extend(copies)
    copy_tokens = sum(len(d) for d in copies)
    rng.shuffle(docs)
    stream = [i for d in docs for i in d + [eot]]
    train_ids = torch.tensor(stream, dtype=torch.int32, device=dev)
    venc = tok.encode_batch([f["text"] for f in val_f], add_special_tokens=False)
    val_ids = torch.tensor([i for e in venc for i in e.ids + [eot]], dtype=torch.int32, device=dev)
    bytes_per_tok = corpus["train_bytes"] / max(1, code_tokens)
    data = {"train_tokens": len(stream), "train_code_tokens": code_tokens, "chat_examples_available": len(chats),
            "chat_examples_used": used_chat, "chat_tokens": chat_tokens, "copy_documents": len(copies),
            "copy_tokens": copy_tokens, "val_tokens": len(val_ids),
            "bytes_per_token": bytes_per_tok}
    log(f"tokenized in {time.time() - t:.1f}s:", json.dumps(data))
    if chats:
        log("chat example:", json.dumps(chats[0][:400]))

    c = dict(MODEL_DIMS)
    c["vocab_size"] = args.vocab
    if args.tiny:
        c.update(hidden_size=64, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
                 linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                 head_dim=32, mrope_section=[2, 1, 1], layer_types=[LIN, LIN, LIN, FULL], num_hidden_layers=4)

    # equivalence with transformers
    t = time.time()
    eq = hf_equivalence(c, eot, im_end, dev)
    log(f"equivalence vs transformers ({time.time() - t:.1f}s):", json.dumps(eq))
    assert eq["max_abs_logit_diff_vs_transformers_f32"] < 1e-3 * max(1.0, eq["logit_std"]) * 10, eq
    if dev.type == "cuda":  # after the f32 equivalence check
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    model = Model(c).to(dev)
    init_weights(model, args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    n_trunk = sum(p.numel() for n_, p in model.named_parameters() if n_.startswith("model."))
    log(f"params: total {n_params:,} (trunk {n_trunk:,}, mtp {n_params - n_trunk:,}); dims", json.dumps(c))

    decay, no_decay = [], []
    for n_, p in model.named_parameters():
        (decay if p.dim() == 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")

    def amp():
        return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda")

    fwd = losses
    if args.compile:
        fwd = torch.compile(losses)

    T, B = args.seq, args.batch
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    n_train = len(train_ids)
    ar = torch.arange(T + 2, device=dev)

    def get_batch():
        off = torch.randint(0, n_train - T - 2, (B,), generator=gen).to(dev)
        return train_ids[off[:, None] + ar[None, :]].long()

    def lr_at(step, total):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))

    def step_fn(step, total):
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step, total)
        batch = get_batch()
        with amp():
            loss, l1, l2 = fwd(model, batch, args.mtp_weight, not args.mtp_attach)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return l1, l2, gn

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    timings = {}
    if args.smoke:
        # step time at a few batch sizes (fresh optimizer state does not matter for timing)
        for bsz in ([8] if dev.type == "cpu" else [int(x) for x in args.timing_batches.split(",")]):
            B = bsz
            t = time.time()
            step_fn(0, 10)
            sync()
            first = time.time() - t
            t = time.time()
            k = 3 if dev.type == "cpu" else 8
            for _ in range(k):
                step_fn(0, 10)
            sync()
            dt_ = (time.time() - t) / k
            mem = torch.cuda.max_memory_allocated() / 2 ** 30 if dev.type == "cuda" else 0
            timings[f"B{bsz}xT{T}"] = {"first_step_s": first, "step_s": dt_, "tok_per_s": bsz * T / dt_,
                                      "max_mem_gib": mem}
            log(f"timing B={bsz} T={T}: first {first:.2f}s, {dt_ * 1000:.1f} ms/step, {bsz * T / dt_:,.0f} tok/s, "
                f"{mem:.1f} GiB")
        if args.timing_only:
            (out / "timings.json").write_text(json.dumps(timings, indent=1))
            log("timing-only: done")
            return 0
        B = args.batch
        model = Model(c).to(dev)
        init_weights(model, args.seed)
        decay, no_decay = [], []
        for n_, p in model.named_parameters():
            (decay if p.dim() == 2 else no_decay).append(p)
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
        total = min(args.steps, 30)
    else:
        total = args.steps

    # training
    log(f"training: {total} steps of {B}x{T} tokens, lr {args.lr}, budget {args.time_budget}s")
    hist, best = [], None
    t_train = time.time()
    ema = None
    step = 0
    stopped_early = False
    for step in range(total):
        l1, l2, gn = step_fn(step, total)
        if step % 25 == 0 or step == total - 1:
            l1f, l2f = float(l1.detach()), float(l2.detach())
            ema = l1f if ema is None else 0.9 * ema + 0.1 * l1f
            el = time.time() - t_train
            log(f"step {step:5d} loss {l1f:.4f} mtp {l2f:.4f} gnorm {float(gn):.3f} lr {lr_at(step, total):.2e} "
                f"{el:.0f}s {(step + 1) * B * T / el:,.0f} tok/s")
        if (step + 1) % args.eval_every == 0 or step == total - 1:
            ev = evaluate(model, val_ids, T, 16, args.eval_windows, dev, amp)
            ev.update(step=step + 1, train_s=time.time() - t_train)
            hist.append(ev)
            log("eval", json.dumps(ev))
            if best is None or ev["val_loss"] < best[0]["val_loss"]:
                best = (ev, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
        if time.time() - t_train > args.time_budget:
            log(f"time budget reached at step {step + 1}; stopping")
            stopped_early = True
            ev = evaluate(model, val_ids, T, 16, args.eval_windows, dev, amp)
            ev.update(step=step + 1, train_s=time.time() - t_train)
            hist.append(ev)
            if best is None or ev["val_loss"] < best[0]["val_loss"]:
                best = (ev, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
            break
    train_s = time.time() - t_train
    steps_done = step + 1
    final = hist[-1]
    model.load_state_dict(best[1])
    full_val = evaluate(model, val_ids, T, 16, 10 ** 9, dev, amp)
    log("best checkpoint at step", best[0]["step"], "full held-out eval:", json.dumps(full_val))

    prompts = ["def fibonacci(n):", "import os\n\ndef list_python_files(path):",
               "class Stack:\n    def __init__(self):", "def is_prime(n):\n    \"\"\"Return True if n is prime.\"\"\"",
               "<|im_start|>user\nWrite a function that reverses a string.<|im_end|>\n<|im_start|>assistant\n<think>\n"]
    samples = {p: greedy_sample(model, tok, p, 40 if args.smoke else 60, dev, amp) for p in prompts}
    for p, s in samples.items():
        log("sample", json.dumps(p), "->", json.dumps(s))

    # bf16 export parts (names as published, see export.py)
    sd = {}
    for k, v in model.state_dict().items():
        name = "model.language_model." + k[len("model."):] if k.startswith("model.") else k
        sd[name] = v.detach().to("cpu", torch.bfloat16)
    parts = split_save(sd, out, "weights") if not args.smoke else []
    bf16_bytes = sum(v.numel() * 2 for v in sd.values())

    metrics = {
        "env": env, "corpus": corpus, "data": data, "dims": c, "params": {"total": n_params, "trunk": n_trunk,
                                                                          "mtp": n_params - n_trunk},
        "bf16_bytes": bf16_bytes,
        "hyper": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "equivalence": eq, "timings": timings,
        "train": {"steps_planned": total, "steps_done": steps_done, "stopped_early": stopped_early,
                  "train_s": train_s, "tokens_seen": steps_done * B * T, "batch": B, "seq": T,
                  "epochs": steps_done * B * T / len(stream)},
        "eval_history": hist, "final_eval": final, "best_eval": best[0], "best_full_heldout": full_val,
        "samples": samples, "weight_parts": parts, "tokenizer_config": tcfg,
        "special_ids": {"<|endoftext|>": eot, "<|im_end|>": im_end,
                        "<|im_start|>": tok.token_to_id("<|im_start|>")},
        "wall_s": time.time() - T0,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, ensure_ascii=False))
    log(f"done in {time.time() - T0:.0f}s; best val loss {full_val['val_loss']:.4f} ppl {full_val['val_ppl']:.2f}; "
        f"mtp acc {full_val['val_mtp_top1_acc']:.3f}; parts {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
