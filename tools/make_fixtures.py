#!/usr/bin/env python3
"""Build the TensorFold oracle fixtures: tiny random-weight Qwen3.5 checkpoints and float64 references.

Usage (from the repo root, with the venv described in tools/README.md):

    tools/.venv/bin/python tools/make_fixtures.py                 # all fixtures, wait up to 20 min for the tokenizer
    tools/.venv/bin/python tools/make_fixtures.py --tokenizer-wait 0
    tools/.venv/bin/python tools/make_fixtures.py --only tiny-wrapper-bf16 tiny-mlx-4bit

Everything is seeded, so a re-run writes byte-identical weight files and references (given the same package
versions, see tools/requirements-fixtures.txt).

Fixtures (each in fixtures/<name>/):
  tiny-wrapper-bf16      published multimodal wrapper layout (model.language_model.*, model.visual.*, mtp.*), bf16,
                         tied, irregular layer_types, Hk != Hv, Dk != Dv.
  tiny-flat-f32-sharded  flat qwen3_5_text, f32, untied, 3 shards + index, full_attention_interval only,
                         legacy top-level rope_theta / partial_rotary_factor.
  tiny-flat-f16-notok    flat, f16, tied, layer_types starting with full attention, Hk=1 Hv=3, Dk > Dv, no tokenizer.
  tiny-mlx-4bit          mlx-lm affine 4-bit gs64 conversion of tiny-wrapper-bf16.
  tiny-mlx-mixed         mlx-lm conversion of tiny-wrapper-bf16 with per-module bits {2,3,4,5,6,8} x gs {32,64,128},
                         one Linear left unquantized.

Each fixture gets reference.safetensors (prompt_ids I64[T], logits F64[T,V], greedy_ids I64[N], greedy_margins F64[N])
and reference.json (versions, dims, what it exercises, checks, margins, file hashes).

The reference logits come from transformers' Qwen3_5ForCausalLM in float64 (eager attention, torch fallback of the
chunked delta rule) on the exact stored weights upcast to float64. transformers hard-codes float32 "upcasts" in
RMSNorm, the gated norm, g = -exp(A_log)*softplus(..), RoPE cos/sin, the softmax and the delta rule; in a float64
model those are *downcasts*, so the reference run patches them to float64 (see `f64_everywhere`). The result is
checked against an independent float64 numpy implementation of the spec (recurrent delta rule), which must agree to
~1e-10; the unpatched transformers float64 run is also recorded (agrees to ~1e-5).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import json
import math
import platform
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
TOKENIZER_DIR = FIXTURES / "tokenizer"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]

T_PROMPT = 12
N_GREEDY = 16
PROMPT_ID_MAX = 490  # prompt ids in [0, 490): inside any tokenizer of <= 500 ids
MIN_GREEDY_MARGIN = 0.1  # prompt search: first seed whose greedy margins are all >= this
# The shared test tokenizer (fixtures/tokenizer) has BPE ids 0..487, specials 488..499 (<|endoftext|> 488,
# <|im_end|> 490); the model vocab is padded to 512. The prompt search also requires every greedy token to be a
# plain BPE id (< 488), so no greedy step hits an EOS id, a special token or a padded row an engine might mask.
GREEDY_ID_LIMIT = 488

LIN = "linear_attention"
FULL = "full_attention"

# ----------------------------------------------------------------------------------------------------------------
# Fixture specifications
# ----------------------------------------------------------------------------------------------------------------

COMMON = dict(
    vocab_size=512,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    partial_rotary_factor=0.25,
    rope_theta=10000000.0,
    rms_norm_eps=1e-6,
    linear_conv_kernel_dim=4,
)

SPEC_WRAPPER = dict(
    COMMON,
    name="tiny-wrapper-bf16",
    seed=101,
    hidden_size=64,
    intermediate_size=256,
    layer_types=[LIN, FULL, LIN, LIN, FULL],
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=32,
    tie_word_embeddings=True,
    dtype="bfloat16",
)

SPEC_SHARDED = dict(
    COMMON,
    name="tiny-flat-f32-sharded",
    seed=202,
    # 0.5 (16 of 32 dims), not the common 0.25: with the transformers default also 0.25, only a non-default value
    # shows that the legacy top-level key is actually read.
    partial_rotary_factor=0.5,
    hidden_size=64,
    intermediate_size=128,
    full_attention_interval=2,
    num_hidden_layers=4,
    linear_num_key_heads=2,
    linear_num_value_heads=2,
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    tie_word_embeddings=False,
    dtype="float32",
)

SPEC_F16 = dict(
    COMMON,
    name="tiny-flat-f16-notok",
    seed=303,
    hidden_size=128,
    intermediate_size=128,
    layer_types=[FULL, LIN, LIN, FULL, LIN],
    linear_num_key_heads=1,
    linear_num_value_heads=3,
    linear_key_head_dim=32,
    linear_value_head_dim=16,
    tie_word_embeddings=True,
    dtype="float16",
)

TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# Vocabulary ids for the wrapper's multimodal special tokens: in the padded part of the vocab (the tokenizer has
# <= 500 ids), as the real model's padded rows 248077..248319 are unused.
WRAPPER_SPECIAL_IDS = dict(vision_start_token_id=504, vision_end_token_id=505, image_token_id=506,
                           video_token_id=507)


def layer_types_of(spec: dict) -> list[str]:
    if "layer_types" in spec:
        return list(spec["layer_types"])
    n, k = spec["num_hidden_layers"], spec["full_attention_interval"]
    return [LIN if (i + 1) % k else FULL for i in range(n)]


# ----------------------------------------------------------------------------------------------------------------
# Random weights (numpy float64, HF flat text names "model.*" / "lm_head.weight")
# ----------------------------------------------------------------------------------------------------------------


def make_text_weights(spec: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    H, I, V = spec["hidden_size"], spec["intermediate_size"], spec["vocab_size"]
    nh, nkv, hd = spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]
    Hk, Hv = spec["linear_num_key_heads"], spec["linear_num_value_heads"]
    Dk, Dv, K = spec["linear_key_head_dim"], spec["linear_value_head_dim"], spec["linear_conv_kernel_dim"]
    key_dim, value_dim = Hk * Dk, Hv * Dv
    conv_dim = 2 * key_dim + value_dim

    def lin(out, inp, gain=1.0):
        return rng.normal(0.0, gain / math.sqrt(inp), size=(out, inp))

    def znorm(n):  # zero-centred (1 + w) norm weight
        return rng.normal(0.0, 0.3, size=(n,))

    w: dict[str, np.ndarray] = {}
    w["model.embed_tokens.weight"] = rng.normal(0.0, 0.4, size=(V, H))
    for i, lt in enumerate(layer_types_of(spec)):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = znorm(H)
        w[p + "post_attention_layernorm.weight"] = znorm(H)
        if lt == LIN:
            q = p + "linear_attn."
            w[q + "in_proj_qkv.weight"] = lin(conv_dim, H)
            w[q + "in_proj_z.weight"] = lin(value_dim, H)
            w[q + "in_proj_b.weight"] = lin(Hv, H, 1.5)
            w[q + "in_proj_a.weight"] = lin(Hv, H, 1.0)
            w[q + "conv1d.weight"] = rng.normal(0.0, 0.5, size=(conv_dim, 1, K))
            w[q + "A_log"] = np.log(rng.uniform(0.05, 4.0, size=(Hv,)))
            w[q + "dt_bias"] = rng.normal(0.0, 1.0, size=(Hv,))
            w[q + "norm.weight"] = 1.0 + rng.normal(0.0, 0.25, size=(Dv,))  # plain weight, around 1
            w[q + "out_proj.weight"] = lin(H, value_dim)
        else:
            a = p + "self_attn."
            w[a + "q_proj.weight"] = lin(nh * hd * 2, H)
            w[a + "k_proj.weight"] = lin(nkv * hd, H)
            w[a + "v_proj.weight"] = lin(nkv * hd, H)
            w[a + "o_proj.weight"] = lin(H, nh * hd)
            w[a + "q_norm.weight"] = znorm(hd)
            w[a + "k_norm.weight"] = znorm(hd)
        w[p + "mlp.gate_proj.weight"] = lin(I, H)
        w[p + "mlp.up_proj.weight"] = lin(I, H)
        w[p + "mlp.down_proj.weight"] = lin(H, I)
    w["model.norm.weight"] = znorm(H)
    if not spec["tie_word_embeddings"]:
        w["lm_head.weight"] = rng.normal(0.0, 0.4, size=(V, H))
    return w


def make_mtp_weights(spec: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One MTP block (qwen35.md §2.2): fc [H,2H], 3 pre/post norms, a full-attention decoder layer. 15 tensors."""
    H, I = spec["hidden_size"], spec["intermediate_size"]
    nh, nkv, hd = spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]

    def lin(out, inp):
        return rng.normal(0.0, 1.0 / math.sqrt(inp), size=(out, inp))

    def znorm(n):
        return rng.normal(0.0, 0.3, size=(n,))

    w = {
        "mtp.fc.weight": lin(H, 2 * H),
        "mtp.pre_fc_norm_embedding.weight": znorm(H),
        "mtp.pre_fc_norm_hidden.weight": znorm(H),
        "mtp.norm.weight": znorm(H),
        "mtp.layers.0.input_layernorm.weight": znorm(H),
        "mtp.layers.0.post_attention_layernorm.weight": znorm(H),
        "mtp.layers.0.self_attn.q_proj.weight": lin(nh * hd * 2, H),
        "mtp.layers.0.self_attn.k_proj.weight": lin(nkv * hd, H),
        "mtp.layers.0.self_attn.v_proj.weight": lin(nkv * hd, H),
        "mtp.layers.0.self_attn.o_proj.weight": lin(H, nh * hd),
        "mtp.layers.0.self_attn.q_norm.weight": znorm(hd),
        "mtp.layers.0.self_attn.k_norm.weight": znorm(hd),
        "mtp.layers.0.mlp.gate_proj.weight": lin(I, H),
        "mtp.layers.0.mlp.up_proj.weight": lin(I, H),
        "mtp.layers.0.mlp.down_proj.weight": lin(H, I),
    }
    return w


TINY_VISION_CONFIG = {
    "model_type": "qwen3_5_vision",
    "depth": 1,
    "hidden_size": 16,
    "hidden_act": "gelu_pytorch_tanh",
    "intermediate_size": 32,
    "num_heads": 2,
    "in_channels": 3,
    "patch_size": 2,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": 64,
    "num_position_embeddings": 16,
    "initializer_range": 0.02,
    "deepstack_visual_indexes": [],
}


def make_visual_dummies(rng: np.random.Generator) -> dict[str, np.ndarray]:
    vc = TINY_VISION_CONFIG
    c, t, p, h = vc["in_channels"], vc["temporal_patch_size"], vc["patch_size"], vc["hidden_size"]
    m = h * vc["spatial_merge_size"] ** 2
    return {
        "model.visual.patch_embed.proj.weight": rng.normal(0, 0.1, size=(h, c, t, p, p)),
        "model.visual.patch_embed.proj.bias": rng.normal(0, 0.1, size=(h,)),
        "model.visual.merger.linear_fc2.weight": rng.normal(0, 0.1, size=(vc["out_hidden_size"], m)),
    }


# ----------------------------------------------------------------------------------------------------------------
# config.json writers
# ----------------------------------------------------------------------------------------------------------------


def text_config_dict(spec: dict, *, legacy_rope: bool, mrope: bool) -> dict:
    c = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "head_dim": spec["head_dim"],
        "hidden_act": "silu",
        "hidden_size": spec["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": spec["intermediate_size"],
        "linear_conv_kernel_dim": spec["linear_conv_kernel_dim"],
        "linear_key_head_dim": spec["linear_key_head_dim"],
        "linear_num_key_heads": spec["linear_num_key_heads"],
        "linear_num_value_heads": spec["linear_num_value_heads"],
        "linear_value_head_dim": spec["linear_value_head_dim"],
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 4096,
        "mlp_only_layers": [],
        "model_type": "qwen3_5_text",
        "num_attention_heads": spec["num_attention_heads"],
        "num_hidden_layers": len(layer_types_of(spec)),
        "num_key_value_heads": spec["num_key_value_heads"],
        "rms_norm_eps": spec["rms_norm_eps"],
        "tie_word_embeddings": spec["tie_word_embeddings"],
        "use_cache": True,
        "vocab_size": spec["vocab_size"],
    }
    if "layer_types" in spec:
        c["layer_types"] = list(spec["layer_types"])
        # Published configs carry both; 4 here deliberately disagrees with an irregular layer_types, so an engine
        # that derives the pattern from the interval instead of layer_types fails.
        c["full_attention_interval"] = 4
    else:
        c["full_attention_interval"] = spec["full_attention_interval"]
    if legacy_rope:
        c["rope_theta"] = spec["rope_theta"]
        c["partial_rotary_factor"] = spec["partial_rotary_factor"]
    else:
        rp = {"rope_type": "default", "rope_theta": spec["rope_theta"],
              "partial_rotary_factor": spec["partial_rotary_factor"]}
        if mrope:
            # rotary dims = 32 * 0.25 = 8 -> 4 frequencies; sections must sum to 4 (published: [11, 11, 10] for 32).
            rp["mrope_interleaved"] = True
            rp["mrope_section"] = [2, 1, 1]
        c["rope_parameters"] = rp
    return c


def wrapper_config(spec: dict) -> dict:
    import transformers

    tc = text_config_dict(spec, legacy_rope=False, mrope=True)
    tc["dtype"] = spec["dtype"]
    tc["mtp_num_hidden_layers"] = 1
    tc["mtp_use_dedicated_embeddings"] = False
    cfg = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": tc,
        "tie_word_embeddings": spec["tie_word_embeddings"],
        "transformers_version": transformers.__version__,
        "vision_config": copy.deepcopy(TINY_VISION_CONFIG),
    }
    cfg.update(WRAPPER_SPECIAL_IDS)
    return dict(sorted(cfg.items()))


def flat_config(spec: dict, *, legacy_rope: bool, dtype_key: str) -> dict:
    import transformers

    c = text_config_dict(spec, legacy_rope=legacy_rope, mrope=False)
    c["architectures"] = ["Qwen3_5ForCausalLM"]
    c[dtype_key] = spec["dtype"]
    c["transformers_version"] = transformers.__version__
    return dict(sorted(c.items()))


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")


# ----------------------------------------------------------------------------------------------------------------
# Writing HF checkpoints
# ----------------------------------------------------------------------------------------------------------------


def to_storage(w: dict[str, np.ndarray], dtype: torch.dtype, keep_f32: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in w.items():
        t = torch.from_numpy(np.ascontiguousarray(v))
        dt = torch.float32 if any(k.endswith(s) for s in keep_f32) else dtype
        out[k] = t.to(dt).contiguous()
    return out


def save_single(d: Path, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    save_file(dict(sorted(tensors.items())), str(d / "model.safetensors"), metadata={"format": "pt"})


def save_sharded(d: Path, tensors: dict[str, torch.Tensor], groups: list[list[str]]) -> None:
    from safetensors.torch import save_file

    n = len(groups)
    weight_map, total = {}, 0
    assigned = [k for g in groups for k in g]
    assert sorted(assigned) == sorted(tensors), "sharding must assign every tensor exactly once"
    for i, g in enumerate(groups):
        name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save_file({k: tensors[k] for k in sorted(g)}, str(d / name), metadata={"format": "pt"})
        for k in g:
            weight_map[k] = name
            total += tensors[k].numel() * tensors[k].element_size()
    write_json(d / "model.safetensors.index.json",
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


def fresh_dir(name: str) -> Path:
    d = FIXTURES / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def build_wrapper(spec: dict) -> Path:
    rng = np.random.default_rng(spec["seed"])
    text = make_text_weights(spec, rng)
    mtp = make_mtp_weights(spec, rng)
    vis = make_visual_dummies(rng)
    w = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v for k, v in text.items()}
    w.update(mtp)
    w.update(vis)
    d = fresh_dir(spec["name"])
    # A_log kept float32 (as mlx-lm's cast_predicate preserves it and as Qwen3-Next-style exports ship it);
    # everything else bfloat16.
    save_single(d, to_storage(w, torch.bfloat16, keep_f32=("A_log",)))
    write_json(d / "config.json", wrapper_config(spec))
    return d


def build_sharded(spec: dict) -> Path:
    rng = np.random.default_rng(spec["seed"])
    w = make_text_weights(spec, rng)
    d = fresh_dir(spec["name"])
    t = to_storage(w, torch.float32)
    n = len(layer_types_of(spec))
    g1 = ["model.embed_tokens.weight"] + [k for k in t if k.startswith(("model.layers.0.", "model.layers.1."))]
    # shard 2 holds layer 2 and the first half of layer 3's tensors (a layer split across shards)
    l3 = sorted(k for k in t if k.startswith("model.layers.3."))
    g2 = [k for k in t if k.startswith("model.layers.2.")] + l3[: len(l3) // 2]
    g3 = l3[len(l3) // 2:] + ["model.norm.weight", "lm_head.weight"]
    assert n == 4
    save_sharded(d, t, [g1, g2, g3])
    write_json(d / "config.json", flat_config(spec, legacy_rope=True, dtype_key="torch_dtype"))
    return d


def build_f16(spec: dict) -> Path:
    rng = np.random.default_rng(spec["seed"])
    w = make_text_weights(spec, rng)
    d = fresh_dir(spec["name"])
    save_single(d, to_storage(w, torch.float16))
    write_json(d / "config.json", flat_config(spec, legacy_rope=False, dtype_key="dtype"))
    return d


# ----------------------------------------------------------------------------------------------------------------
# MLX conversion with mlx-lm
# ----------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def mlx_layer_types_patch(layer_types: list[str]):
    """mlx-lm 0.32.x builds Qwen3.5 layers from full_attention_interval and ignores layer_types. Make its
    DecoderLayer follow layer_types (needed for the irregular pattern of tiny-wrapper-bf16). The tensors mlx-lm
    writes are unaffected by this (same sanitize/quantize/save code)."""
    import mlx.nn as nn
    from mlx_lm.models import qwen3_5 as m

    orig_layer_init = m.DecoderLayer.__init__
    orig_model_init = m.Qwen3_5TextModel.__init__

    def layer_init(self, args, layer_idx):
        nn.Module.__init__(self)
        self.is_linear = layer_types[layer_idx] == LIN
        if self.is_linear:
            self.linear_attn = m.GatedDeltaNet(args)
        else:
            self.self_attn = m.Attention(args)
        self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        assert args.num_experts <= 0
        self.mlp = m.MLP(args.hidden_size, args.intermediate_size)

    def model_init(self, args):
        orig_model_init(self, args)
        self.ssm_idx = layer_types.index(LIN)
        self.fa_idx = layer_types.index(FULL)

    m.DecoderLayer.__init__ = layer_init
    m.Qwen3_5TextModel.__init__ = model_init
    try:
        yield
    finally:
        m.DecoderLayer.__init__ = orig_layer_init
        m.Qwen3_5TextModel.__init__ = orig_model_init


def mlx_convert(src: Path, name: str, bits: int, group_size: int, quant_predicate=None) -> Path:
    """The body of mlx_lm.convert.convert() (load lazily, cast to the config dtype except A_log, quantize_model,
    save_model, save_config), minus the tokenizer round trip (the tokenizer files are copied verbatim later) and
    the model card."""
    import mlx.core as mx
    from mlx.utils import tree_map_with_path
    from mlx_lm.utils import load_model, quantize_model, save_config, save_model

    d = fresh_dir(name)
    src_cfg = json.loads((src / "config.json").read_text())
    lt = src_cfg.get("text_config", src_cfg)["layer_types"]
    with mlx_layer_types_patch(lt):
        model, config = load_model(src, lazy=True)
    dtype = config.get("torch_dtype", None)
    if dtype is None and (text_config := config.get("text_config", None)):
        dtype = text_config.get("dtype", None)
    assert dtype == "bfloat16", dtype
    dtype = getattr(mx, dtype)
    cast_predicate = getattr(model, "cast_predicate", lambda _: True)

    def set_dtype(k, v):
        if cast_predicate(k) and mx.issubdtype(v.dtype, mx.floating):
            return v.astype(dtype)
        return v

    model.update(tree_map_with_path(set_dtype, model.parameters()))
    qp = quant_predicate(model) if quant_predicate is not None else None
    model, config = quantize_model(model, config, group_size, bits, mode="affine", quant_predicate=qp)
    save_model(d, model, donate_model=True)
    save_config(config, config_path=d / "config.json")
    return d


def mixed_predicate_builder(model):
    """Per-module {bits, group_size} so that every width 2,3,4,5,6,8 and every group size 32,64,128 occurs, some
    modules fall back to the default (return True: 4 bits, gs 64, no per-module entry) and one Linear stays
    unquantized (return False: plain bf16 weight in a quantized checkpoint)."""
    combos = [(2, 32), (3, 64), (4, 128), (5, 32), (6, 64), (8, 128), (2, 64), (3, 128), (5, 64), (6, 128),
              (8, 32), (2, 128), (3, 32), (5, 128), (6, 32), (8, 64), (4, 32)]
    state = {"i": 0}

    def predicate(path, module):
        if path.endswith("layers.0.linear_attn.in_proj_b"):
            return False
        if path.endswith(("layers.2.mlp.up_proj", "layers.4.self_attn.k_proj")):
            return True
        in_dim = module.weight.shape[-1]
        while True:
            bits, gs = combos[state["i"] % len(combos)]
            state["i"] += 1
            if in_dim % gs == 0:
                return {"group_size": gs, "bits": bits, "mode": "affine"}

    return predicate


# ----------------------------------------------------------------------------------------------------------------
# Reading checkpoints back as float64 HF flat text state dicts
# ----------------------------------------------------------------------------------------------------------------


def weight_files(d: Path) -> list[Path]:
    idx = d / "model.safetensors.index.json"
    if idx.exists():
        wm = json.loads(idx.read_text())["weight_map"]
        return [d / f for f in sorted(set(wm.values()))]
    return [d / "model.safetensors"]


def read_raw(d: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out = {}
    for f in weight_files(d):
        for k, v in load_file(str(f)).items():
            assert k not in out, k
            out[k] = v
    return out


def load_hf_text_f64(d: Path) -> dict[str, torch.Tensor]:
    sd = {}
    for k, v in read_raw(d).items():
        if k.startswith(("mtp.", "model.visual.")):
            continue
        if k.startswith("model.language_model."):
            k = "model." + k[len("model.language_model."):]
        sd[k] = v.to(torch.float64)
    return sd


def unpack_codes(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    """MLX affine packing: per row, one little-endian bitstream, code i at bits [i*bits, (i+1)*bits)."""
    rows = packed.shape[0]
    by = packed.astype("<u4").view(np.uint8).reshape(rows, -1)
    bitstream = np.unpackbits(by, axis=1, bitorder="little")[:, : n * bits].reshape(rows, n, bits)
    return (bitstream.astype(np.int64) << np.arange(bits, dtype=np.int64)).sum(-1)


def dequant_f64(wq: torch.Tensor, scales: torch.Tensor, biases: torch.Tensor, bits: int, gs: int) -> torch.Tensor:
    rows, cols = wq.shape
    n = cols * 32 // bits
    assert n == scales.shape[1] * gs, (wq.shape, scales.shape, bits, gs)
    q = unpack_codes(wq.numpy(), bits, n).astype(np.float64)
    s = np.repeat(scales.to(torch.float64).numpy(), gs, axis=1)
    b = np.repeat(biases.to(torch.float64).numpy(), gs, axis=1)
    return torch.from_numpy(s * q + b)


MLX_SHIFTED_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
                     ".q_norm.weight", ".k_norm.weight")


def load_mlx_text_f64(d: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """Dequantize in float64 (w = scale*q + bias), undo the MLX conventions (conv [C,K,1] -> [C,1,K], norms stored
    as 1+w -> w) and rename to HF flat text names. Returns (state dict, per-module quant params used)."""
    cfg = json.loads((d / "config.json").read_text())
    quant = cfg["quantization"]
    raw = read_raw(d)
    sd, used = {}, {}
    for k, v in raw.items():
        if k.endswith((".scales", ".biases")):
            continue
        mod = k[: -len(".weight")] if k.endswith(".weight") else None
        if mod is not None and mod + ".scales" in raw:
            p = quant.get(mod, quant)
            bits, gs = p["bits"], p["group_size"]
            assert p.get("mode", "affine") == "affine"
            assert v.dtype == torch.uint32, (k, v.dtype)
            v = dequant_f64(v, raw[mod + ".scales"], raw[mod + ".biases"], bits, gs)
            used[mod] = (bits, gs)
        else:
            v = v.to(torch.float64)
        assert k.startswith("language_model."), k
        k = k[len("language_model."):]
        if k.endswith("conv1d.weight"):
            assert v.shape[-1] == 1, v.shape
            v = v.permute(0, 2, 1).contiguous()
        if k.endswith(MLX_SHIFTED_NORMS) and "linear_attn" not in k:
            v = v - 1.0
        sd[k] = v
    return sd, used


# ----------------------------------------------------------------------------------------------------------------
# float64 forward passes
# ----------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def f64_everywhere():
    """Turn transformers' hard-coded float32 casts (x.float(), .to(torch.float32), softmax(dtype=float32)) into
    float64 for the duration of the reference forward."""
    orig_to, orig_float, orig_softmax = torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax

    def to(self, *args, **kwargs):
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        if kwargs.get("dtype", None) is torch.float32:
            kwargs["dtype"] = torch.float64
        return orig_to(self, *args, **kwargs)

    def flt(self, *args, **kwargs):
        return orig_to(self, torch.float64)

    def softmax(x, dim=None, _stacklevel=3, dtype=None):
        if dtype is torch.float32:
            dtype = torch.float64
        return orig_softmax(x, dim=dim, dtype=dtype)

    torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax = to, flt, softmax
    try:
        yield
    finally:
        torch.Tensor.to, torch.Tensor.float, torch.nn.functional.softmax = orig_to, orig_float, orig_softmax


def text_config_from_dir(d: Path):
    from transformers import Qwen3_5TextConfig

    tc = Qwen3_5TextConfig.from_pretrained(str(d))
    tc._attn_implementation = "eager"
    return tc


def hf_model_f64(d: Path, sd: dict[str, torch.Tensor]):
    from transformers import Qwen3_5ForCausalLM

    tc = text_config_from_dir(d)
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(tc).to(torch.float64).eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    tied = tc.tie_word_embeddings
    assert not unexpected, unexpected
    assert set(missing) == ({"lm_head.weight"} if tied else set()), missing
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    # RoPE inverse frequencies were computed in float32 at init: recompute in float64.
    rot = model.model.rotary_emb
    dim = int(tc.head_dim * tc.rope_parameters["partial_rotary_factor"])
    theta = tc.rope_parameters["rope_theta"]
    rot.inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    return model, tc


@torch.no_grad()
def hf_logits(model, ids: list[int], patched: bool = True) -> torch.Tensor:
    x = torch.tensor([ids], dtype=torch.long)
    ctx = f64_everywhere() if patched else contextlib.nullcontext()
    with ctx:
        out = model(input_ids=x, use_cache=False).logits[0]
    return out.to(torch.float64)


def np_reference_logits(sd: dict[str, torch.Tensor], tc, ids: list[int]) -> np.ndarray:
    """Independent float64 implementation of qwen35.md §3 (recurrent delta rule, explicit loops)."""
    W = {k: v.numpy().astype(np.float64) for k, v in sd.items()}
    eps = tc.rms_norm_eps
    H, T = tc.hidden_size, len(ids)
    nh, nkv, hd = tc.num_attention_heads, tc.num_key_value_heads, tc.head_dim
    Hk, Hv, Dk, Dv = tc.linear_num_key_heads, tc.linear_num_value_heads, tc.linear_key_head_dim, tc.linear_value_head_dim
    K = tc.linear_conv_kernel_dim
    rot = int(hd * tc.rope_parameters["partial_rotary_factor"])
    theta = tc.rope_parameters["rope_theta"]

    def rms0(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 + w)

    def silu(x):
        return x / (1.0 + np.exp(-x))

    def softplus(x):
        return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))

    def l2n(x):
        return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)

    inv = 1.0 / theta ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x):  # x [T, heads, hd]
        h2 = rot // 2
        x1, x2 = x[..., :h2], x[..., h2:rot]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, x[..., rot:]], -1)

    h = W["model.embed_tokens.weight"][ids]
    for i, lt in enumerate(tc.layer_types):
        p = f"model.layers.{i}."
        u = rms0(h, W[p + "input_layernorm.weight"])
        if lt == LIN:
            q_ = p + "linear_attn."
            key_dim, value_dim = Hk * Dk, Hv * Dv
            mixed = u @ W[q_ + "in_proj_qkv.weight"].T
            z = (u @ W[q_ + "in_proj_z.weight"].T).reshape(T, Hv, Dv)
            b = u @ W[q_ + "in_proj_b.weight"].T
            a = u @ W[q_ + "in_proj_a.weight"].T
            cw = W[q_ + "conv1d.weight"][:, 0, :]  # [C, K]
            pad = np.concatenate([np.zeros((K - 1, mixed.shape[1])), mixed], 0)
            conv = np.stack([(pad[t:t + K] * cw.T).sum(0) for t in range(T)])
            x = silu(conv)
            q = x[:, :key_dim].reshape(T, Hk, Dk)
            k = x[:, key_dim:2 * key_dim].reshape(T, Hk, Dk)
            v = x[:, 2 * key_dim:].reshape(T, Hv, Dv)
            beta = 1.0 / (1.0 + np.exp(-b))
            g = -np.exp(W[q_ + "A_log"]) * softplus(a + W[q_ + "dt_bias"])
            r = Hv // Hk
            o = np.zeros((T, Hv, Dv))
            for hh in range(Hv):
                kh = hh // r
                S = np.zeros((Dk, Dv))
                for t in range(T):
                    qh = l2n(q[t, kh]) * Dk ** -0.5
                    kk = l2n(k[t, kh])
                    S = S * np.exp(g[t, hh])
                    kv = S.T @ kk
                    d = beta[t, hh] * (v[t, hh] - kv)
                    S = S + np.outer(kk, d)
                    o[t, hh] = S.T @ qh
            y = o / np.sqrt((o * o).mean(-1, keepdims=True) + eps) * W[q_ + "norm.weight"] * silu(z)
            u = y.reshape(T, value_dim) @ W[q_ + "out_proj.weight"].T
        else:
            s_ = p + "self_attn."
            qg = (u @ W[s_ + "q_proj.weight"].T).reshape(T, nh, 2 * hd)
            q, gate = qg[..., :hd], qg[..., hd:]
            k = (u @ W[s_ + "k_proj.weight"].T).reshape(T, nkv, hd)
            v = (u @ W[s_ + "v_proj.weight"].T).reshape(T, nkv, hd)
            q = rope(rms0(q, W[s_ + "q_norm.weight"]))
            k = rope(rms0(k, W[s_ + "k_norm.weight"]))
            att = np.zeros((T, nh, hd))
            mask = np.triu(np.full((T, T), -np.inf), 1)
            for j in range(nh):
                kv = j // (nh // nkv)
                sc = q[:, j] @ k[:, kv].T * hd ** -0.5 + mask
                sc = np.exp(sc - sc.max(-1, keepdims=True))
                sc /= sc.sum(-1, keepdims=True)
                att[:, j] = sc @ v[:, kv]
            o = att.reshape(T, nh * hd) * (1.0 / (1.0 + np.exp(-gate.reshape(T, nh * hd))))
            u = o @ W[s_ + "o_proj.weight"].T
        h = h + u
        u = rms0(h, W[p + "post_attention_layernorm.weight"])
        m = p + "mlp."
        h = h + (silu(u @ W[m + "gate_proj.weight"].T) * (u @ W[m + "up_proj.weight"].T)) @ W[m + "down_proj.weight"].T
    h = rms0(h, W["model.norm.weight"])
    lm = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return h @ lm.T


def top2_margin(row: torch.Tensor) -> float:
    v = torch.topk(row, 2).values
    return float(v[0] - v[1])


def greedy(model, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    ids, out, margins = list(prompt), [], []
    for _ in range(n):
        last = hf_logits(model, ids)[-1]
        nxt = int(torch.argmax(last))
        margins.append(top2_margin(last))
        out.append(nxt)
        ids.append(nxt)
    return out, margins


def choose_prompt(model, base_seed: int) -> tuple[int, list[int], list[int], list[float]]:
    best = None
    for s in range(200):
        seed = base_seed * 1000 + s
        prompt = np.random.default_rng(seed).integers(0, PROMPT_ID_MAX, size=T_PROMPT).tolist()
        g, m = greedy(model, prompt, N_GREEDY)
        if max(g) >= GREEDY_ID_LIMIT:
            continue
        if best is None or min(m) > min(best[3]):
            best = (seed, prompt, g, m)
        if min(m) >= MIN_GREEDY_MARGIN:
            return seed, prompt, g, m
    assert best is not None, "no prompt seed gave greedy ids below GREEDY_ID_LIMIT"
    return best


# ----------------------------------------------------------------------------------------------------------------
# Sanity checks against native-dtype runs
# ----------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def native_transformers_logits(d: Path, prompt: list[int]) -> tuple[torch.Tensor, str]:
    """from_pretrained on the written checkpoint in its stored dtype (CPU), plain transformers numerics."""
    from transformers import Qwen3_5ForCausalLM

    model = Qwen3_5ForCausalLM.from_pretrained(str(d), dtype="auto", attn_implementation="eager").eval()
    dt = str(next(model.parameters()).dtype)
    out = model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0].to(torch.float64)
    return out, dt


def mlx_logits_f32(d: Path, prompt: list[int]) -> np.ndarray:
    """mlx-lm's own forward on the written MLX checkpoint, with scales/biases/float params upcast to float32."""
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.utils import load_model

    cfg = json.loads((d / "config.json").read_text())
    with mlx_layer_types_patch(cfg["text_config"]["layer_types"]):
        model, _ = load_model(d)
    model.update(tree_map(lambda v: v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v,
                          model.parameters()))
    out = model(mx.array([prompt]))[0].astype(mx.float32)
    mx.eval(out)
    return np.array(out).astype(np.float64)


def mlx_dequant_crosscheck(d: Path, used: dict) -> float:
    """Our float64 unpacker vs mx.dequantize (float32) on every quantized tensor: max abs diff."""
    import mlx.core as mx

    cfg = json.loads((d / "config.json").read_text())
    raw = {}
    for f in weight_files(d):
        raw.update(mx.load(str(f)))
    worst = 0.0
    tsd = read_raw(d)
    for mod, (bits, gs) in used.items():
        ref = mx.dequantize(raw[mod + ".weight"], raw[mod + ".scales"].astype(mx.float32),
                            raw[mod + ".biases"].astype(mx.float32), group_size=gs, bits=bits, mode="affine")
        mine = dequant_f64(tsd[mod + ".weight"], tsd[mod + ".scales"], tsd[mod + ".biases"], bits, gs)
        worst = max(worst, float(np.abs(np.array(ref).astype(np.float64) - mine.numpy()).max()))
    assert cfg["quantization"] == cfg["quantization_config"]
    return worst


# ----------------------------------------------------------------------------------------------------------------
# Reference writing
# ----------------------------------------------------------------------------------------------------------------


def versions() -> dict:
    import safetensors
    import transformers

    v = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
         "numpy": np.__version__, "safetensors": safetensors.__version__}
    try:
        import mlx.core as mx
        import mlx_lm

        v["mlx"] = mx.__version__
        v["mlx_lm"] = mlx_lm.__version__
    except ImportError:
        pass
    return v


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def tensor_inventory(d: Path) -> dict:
    raw = read_raw(d)
    prefixes: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    for k, v in raw.items():
        parts = k.split(".")
        pre = ".".join(parts[:2]) + "." if parts[0] in ("model", "language_model") else parts[0] + "."
        prefixes[pre] = prefixes.get(pre, 0) + 1
        dt = str(v.dtype).replace("torch.", "")
        dtypes[dt] = dtypes.get(dt, 0) + 1
    return {"num_tensors": len(raw), "key_prefixes": dict(sorted(prefixes.items())),
            "dtypes": dict(sorted(dtypes.items()))}


def make_reference(d: Path, spec_info: dict, sd: dict[str, torch.Tensor], extra_checks: dict,
                   native_check=None) -> dict:
    from safetensors.torch import save_file

    model, tc = hf_model_f64(d, sd)
    spec = spec_info["spec"]
    assert tc.rope_parameters["partial_rotary_factor"] == spec["partial_rotary_factor"], tc.rope_parameters
    assert tc.rope_parameters["rope_theta"] == spec["rope_theta"], tc.rope_parameters
    assert list(tc.layer_types) == layer_types_of(spec), tc.layer_types
    assert tc.tie_word_embeddings == spec["tie_word_embeddings"]
    seed, prompt, g_ids, g_margins = choose_prompt(model, spec_info["seed"])
    logits = hf_logits(model, prompt)
    logits_unpatched = hf_logits(model, prompt, patched=False)
    np_logits = np_reference_logits(sd, tc, prompt)
    d_np = float(np.abs(logits.numpy() - np_logits).max())
    d_unpatched = float((logits - logits_unpatched).abs().max())
    assert d_np < 1e-9, f"{d.name}: transformers f64 vs numpy f64 reference differ by {d_np}"
    # greedy continuation must be consistent with teacher forcing of the full sequence
    full = hf_logits(model, prompt + g_ids[:-1])
    assert torch.equal(torch.argmax(full[T_PROMPT - 1:], -1), torch.tensor(g_ids)), "greedy/teacher-forcing mismatch"
    assert torch.allclose(full[:T_PROMPT], logits, atol=1e-12, rtol=0)

    save_file({
        "prompt_ids": torch.tensor(prompt, dtype=torch.int64),
        "logits": logits.contiguous(),
        "greedy_ids": torch.tensor(g_ids, dtype=torch.int64),
        "greedy_margins": torch.tensor(g_margins, dtype=torch.float64),
    }, str(d / "reference.safetensors"), metadata={"format": "pt"})

    tf_margins = [top2_margin(r) for r in logits]
    checks = {
        "max_abs_transformers_f64_vs_numpy_f64": d_np,
        "max_abs_transformers_f64_vs_unpatched_transformers_f64": d_unpatched,
    }
    checks.update(extra_checks)
    if native_check is not None:
        checks.update(native_check(d, prompt, logits))
    tcd = {k: getattr(tc, k) for k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
        "linear_value_head_dim", "linear_conv_kernel_dim", "rms_norm_eps", "tie_word_embeddings", "layer_types")}
    tcd["rope_theta"] = tc.rope_parameters["rope_theta"]
    tcd["partial_rotary_factor"] = tc.rope_parameters["partial_rotary_factor"]
    tcd["rotary_dims"] = int(tc.head_dim * tc.rope_parameters["partial_rotary_factor"])
    logit_std = float(logits.std())
    info = {
        "fixture": d.name,
        "exercises": spec_info["exercises"],
        "storage": spec_info["storage"],
        "dims": tcd,
        "versions": versions(),
        "reference": {
            "how": "transformers Qwen3_5ForCausalLM, float64 (float32 casts patched to float64), eager attention, "
                   "torch chunked delta-rule fallback, use_cache=False; weights = exact stored values upcast to f64"
                   + ("; MLX: dequantized in f64 as scale*q+bias, conv [C,K,1]->[C,1,K], norms minus 1"
                      if spec_info.get("mlx") else ""),
            "prompt_seed": seed,
            "prompt_ids": prompt,
            "T": T_PROMPT,
            "N": N_GREEDY,
            "greedy_ids": g_ids,
            "greedy_min_margin": min(g_margins),
            "teacher_forced_min_top2_margin": min(tf_margins),
            "teacher_forced_top2_margins_gt_1e-3": sum(m > 1e-3 for m in tf_margins),
            "logits_std": logit_std,
            "greedy_recompute": "full forward over prompt + generated tokens at each step",
        },
        "checks": checks,
        "tensors": tensor_inventory(d),
    }
    return info


def finish_fixture(d: Path, info: dict) -> None:
    files = {}
    for p in sorted(d.iterdir()):
        if p.name == "reference.json":
            continue
        files[p.name] = {"bytes": p.stat().st_size, "sha256": sha256(p)}
    info["files"] = files
    info["total_bytes"] = sum(f["bytes"] for f in files.values())
    write_json(d / "reference.json", info)
    print(f"[{d.name}] wrote {len(files)} files, {info['total_bytes']} bytes; greedy min margin "
          f"{info['reference']['greedy_min_margin']:.4g}; checks {json.dumps(info['checks'])}")


def native_check_factory(tol: float | None):
    def check(d: Path, prompt: list[int], ref: torch.Tensor) -> dict:
        out, dt = native_transformers_logits(d, prompt)
        diff = float((out - ref).abs().max())
        print(f"[{d.name}] from_pretrained ({dt}) vs f64 reference: max |diff| = {diff:.3e}")
        same_argmax = int((out.argmax(-1) == ref.argmax(-1)).sum())
        if tol is not None:  # tol is relative to max |logit|: catches wrong loading, not low-precision noise
            assert diff < tol * float(ref.abs().max()), f"{d.name}: native {dt} run differs from f64 by {diff}"
            assert same_argmax >= len(prompt) - 2, f"{d.name}: native {dt} argmax agrees on {same_argmax} rows"
        return {f"max_abs_from_pretrained_{dt.replace('torch.', '')}_vs_f64": diff,
                "from_pretrained_same_argmax_rows": f"{same_argmax}/{len(prompt)}"}
    return check


def mlx_check(d: Path, prompt: list[int], ref: torch.Tensor) -> dict:
    out = mlx_logits_f32(d, prompt)
    diff = float(np.abs(out - ref.numpy()).max())
    print(f"[{d.name}] mlx-lm forward (f32 params) vs f64 reference: max |diff| = {diff:.3e}")
    assert diff < 1e-2, f"{d.name}: mlx-lm forward differs from f64 reference by {diff}"
    return {"max_abs_mlx_lm_forward_f32_vs_f64": diff}


# ----------------------------------------------------------------------------------------------------------------
# Tokenizer stage
# ----------------------------------------------------------------------------------------------------------------

WITH_TOKENIZER = ["tiny-wrapper-bf16", "tiny-flat-f32-sharded", "tiny-mlx-4bit", "tiny-mlx-mixed"]


def wait_for_tokenizer(wait_s: float) -> bool:
    deadline = time.time() + wait_s
    while True:
        if all((TOKENIZER_DIR / f).is_file() for f in TOKENIZER_FILES):
            # give a concurrent writer a moment to finish, then require the json files to parse
            time.sleep(2)
            try:
                for f in ("tokenizer.json", "tokenizer_config.json"):
                    json.loads((TOKENIZER_DIR / f).read_text())
                return True
            except (json.JSONDecodeError, OSError):
                pass
        if time.time() >= deadline:
            return False
        print(f"[tokenizer] waiting for {TOKENIZER_DIR.relative_to(ROOT)}/{{{','.join(TOKENIZER_FILES)}}} "
              f"({int(deadline - time.time())} s left)", flush=True)
        time.sleep(min(30.0, max(1.0, deadline - time.time())))


def tokenizer_special_ids() -> dict[str, int]:
    tj = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text())
    ids = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
    vocab = tj.get("model", {}).get("vocab", {})
    if isinstance(vocab, dict):
        for s in ("<|endoftext|>", "<|im_end|>"):
            if s not in ids and s in vocab:
                ids[s] = vocab[s]
    return ids


def install_tokenizer(names: list[str]) -> dict:
    ids = tokenizer_special_ids()
    eot, im_end = ids.get("<|endoftext|>"), ids.get("<|im_end|>")
    for name in names:
        d = FIXTURES / name
        if not d.exists() or name not in WITH_TOKENIZER:
            continue
        for f in TOKENIZER_FILES:
            shutil.copyfile(TOKENIZER_DIR / f, d / f)
        cfg_path = d / "config.json"
        cfg = json.loads(cfg_path.read_text())
        tc = cfg.get("text_config", cfg)
        # Published layout: text_config.eos = <|endoftext|>, wrapper eos = <|im_end|>, pad = <|endoftext|>.
        if eot is not None:
            tc["eos_token_id"] = eot
            tc["pad_token_id"] = eot
        if "text_config" in cfg:
            if im_end is not None:
                cfg["eos_token_id"] = im_end
            if eot is not None:
                cfg["pad_token_id"] = eot
        elif im_end is not None:
            cfg["eos_token_id"] = im_end
        indent = 4 if name.startswith("tiny-mlx") else 2  # mlx-lm writes indent=4
        cfg_path.write_text(json.dumps(cfg, indent=indent) + ("\n" if indent == 2 else ""))
        # refresh hashes in reference.json
        info = json.loads((d / "reference.json").read_text())
        info["tokenizer"] = {"files": TOKENIZER_FILES, "eos_token_id(<|endoftext|>)": eot,
                             "eos_token_id(<|im_end|>)": im_end,
                             "eos_in_greedy_ids": [i for i in info["reference"]["greedy_ids"] if i in (eot, im_end)]}
        finish_fixture(d, info)
    return {"<|endoftext|>": eot, "<|im_end|>": im_end}


# ----------------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", default=None, help="fixture names to (re)build")
    ap.add_argument("--tokenizer-wait", type=float, default=1200.0,
                    help="seconds to wait for fixtures/tokenizer/* before giving up (default 1200)")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    all_names = ["tiny-wrapper-bf16", "tiny-flat-f32-sharded", "tiny-flat-f16-notok", "tiny-mlx-4bit",
                 "tiny-mlx-mixed"]
    names = args.only or all_names
    for n in names:
        assert n in all_names, n
    FIXTURES.mkdir(exist_ok=True)

    common_ex = ["zero-centred (1+w) RMSNorm with random non-zero w (input/post_attention/final/q_norm/k_norm)",
                 "plain-weight gated RMSNorm (linear_attn.norm) around 1", "random A_log, dt_bias, conv1d",
                 "partial RoPE (NeoX halves, theta 1e7; rotary dims: dims.rotary_dims)", "attention output gate (per-head interleaved q_proj)",
                 "GQA 4 q heads / 2 kv heads", "head_dim != hidden/heads"]

    if "tiny-wrapper-bf16" in names or any(n.startswith("tiny-mlx") for n in names):
        d = FIXTURES / SPEC_WRAPPER["name"]
        if "tiny-wrapper-bf16" in names or not d.exists():
            d = build_wrapper(SPEC_WRAPPER)
            info = make_reference(d, {"spec": SPEC_WRAPPER, "seed": SPEC_WRAPPER["seed"], "storage": "bf16 (A_log f32), single file",
                                      "exercises": common_ex + [
                                          "published wrapper config (qwen3_5 / text_config qwen3_5_text, rope_parameters "
                                          "with mrope_section/mrope_interleaved, vision_config)",
                                          "keys model.language_model.*, dummy model.visual.* and a full mtp.* block to skip",
                                          "tied embeddings (no lm_head)", "irregular layer_types [L,F,L,L,F] "
                                          "(full_attention_interval 4 disagrees on purpose)",
                                          "Hk=2 != Hv=4 (grouped head mapping), Dk=16 != Dv=32",
                                          "bf16 storage with one f32 tensor (A_log)"]},
                                  load_hf_text_f64(d), {}, native_check_factory(tol=0.15))
            finish_fixture(d, info)

    if "tiny-flat-f32-sharded" in names:
        d = build_sharded(SPEC_SHARDED)
        info = make_reference(d, {"spec": SPEC_SHARDED, "seed": SPEC_SHARDED["seed"], "storage": "f32, 3 shards + index",
                                  "exercises": common_ex + [
                                      "flat qwen3_5_text / Qwen3_5ForCausalLM, keys model.* + lm_head.weight",
                                      "untied lm_head", "no layer_types: full_attention_interval 2 -> [L,F,L,F]",
                                      "legacy top-level rope_theta / partial_rotary_factor (0.5 -> 16 rotary dims), no rope_parameters",
                                      "legacy torch_dtype key", "Hk=Hv=2, Dk=Dv=32",
                                      "3 shards + model.safetensors.index.json, one layer split across shards"]},
                              load_hf_text_f64(d), {}, native_check_factory(tol=1e-5))
        finish_fixture(d, info)

    if "tiny-flat-f16-notok" in names:
        d = build_f16(SPEC_F16)
        info = make_reference(d, {"spec": SPEC_F16, "seed": SPEC_F16["seed"], "storage": "f16, single file",
                                  "exercises": common_ex + [
                                      "flat config with rope_parameters (no mrope keys)", "f16 storage", "tied",
                                      "layer_types [F,L,L,F,L] (starts with full attention)",
                                      "Hk=1, Hv=3 (odd ratio), Dk=32 > Dv=16", "hidden 128 = nh*hd",
                                      "no tokenizer: run from ids"]},
                              load_hf_text_f64(d), {}, native_check_factory(tol=0.15))
        finish_fixture(d, info)

    src = FIXTURES / SPEC_WRAPPER["name"]
    mlx_common = ["MLX layout written by mlx-lm (sanitize + quantize_model + save_model/save_config)",
                  "keys language_model.model.*, no mtp/visual, tied: quantized embed_tokens used as output matrix",
                  "conv1d stored [C,K,1]", "zero-centred norms stored as bf16(1+w); linear_attn.norm not shifted",
                  "A_log kept f32 (cast_predicate), other float tensors bf16",
                  "Linear/Embedding as .weight U32 + .scales/.biases bf16",
                  "irregular layer_types [L,F,L,L,F] (mlx-lm 0.32 itself only honours full_attention_interval)",
                  "Hk=2 != Hv=4, Dk=16 != Dv=32"]

    if "tiny-mlx-4bit" in names:
        d = mlx_convert(src, "tiny-mlx-4bit", bits=4, group_size=64)
        sd, used = load_mlx_text_f64(d)
        dq = mlx_dequant_crosscheck(d, used)
        info = make_reference(d, {"spec": SPEC_WRAPPER, "seed": 404, "mlx": True, "storage": "MLX affine 4-bit gs64",
                                  "exercises": mlx_common + ["uniform 4-bit gs64 (quantization + quantization_config)"]},
                              sd, {"max_abs_f64_unpack_vs_mx_dequantize_f32": dq,
                                   "quantized_modules": len(used)}, mlx_check)
        finish_fixture(d, info)

    if "tiny-mlx-mixed" in names:
        d = mlx_convert(src, "tiny-mlx-mixed", bits=4, group_size=64, quant_predicate=mixed_predicate_builder)
        sd, used = load_mlx_text_f64(d)
        bits = sorted({b for b, _ in used.values()})
        gss = sorted({g for _, g in used.values()})
        assert bits == [2, 3, 4, 5, 6, 8] and gss == [32, 64, 128], (bits, gss)
        raw_keys = read_raw(d).keys()
        unq = sorted(k for k in raw_keys if k.endswith("in_proj_b.weight") and k[:-7] + ".scales" not in raw_keys)
        dq = mlx_dequant_crosscheck(d, used)
        combos = sorted({f"{b}bit/gs{g}" for b, g in used.values()})
        info = make_reference(d, {"spec": SPEC_WRAPPER, "seed": 505, "mlx": True, "storage": "MLX affine mixed bits/group sizes",
                                  "exercises": mlx_common + [
                                      "per-module overrides in quantization{} keyed by module path",
                                      "bits 2,3,4,5,6,8 (3/5/6 straddle words) and group sizes 32,64,128",
                                      "modules without an override use the default 4-bit gs64",
                                      "an unquantized Linear (plain bf16 weight, no scales) in a quantized checkpoint"]},
                              sd, {"max_abs_f64_unpack_vs_mx_dequantize_f32": dq, "quantized_modules": len(used),
                                   "bit_groupsize_combos": combos, "unquantized_linears": unq,
                                   "per_module": {k: f"{b}bit/gs{g}" for k, (b, g) in sorted(used.items())}},
                              mlx_check)
        finish_fixture(d, info)

    want_tok = [n for n in names if n in WITH_TOKENIZER]
    if want_tok:
        if wait_for_tokenizer(args.tokenizer_wait):
            ids = install_tokenizer(want_tok)
            print(f"[tokenizer] copied into {want_tok}; special ids {ids}")
        else:
            print(f"[tokenizer] MISSING: {TOKENIZER_DIR} lacks {TOKENIZER_FILES}; fixtures {want_tok} have no "
                  f"tokenizer files. Re-run with --only ... once it exists.", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
