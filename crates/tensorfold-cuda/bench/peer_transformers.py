"""The peer beside us: a synthetic bf16 checkpoint (`tensorfold synth`) through transformers + torch on the same GPU:
greedy decode tok/s after a 64-token prompt and prefill tok/s at 2048 tokens. Usage: peer_transformers.py DIR N."""
import glob, json, os, sys, time

import torch
import transformers
from safetensors.torch import load_file
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

d, n = sys.argv[1], int(sys.argv[2])
dev = os.environ.get("TF_PEER_DEVICE", "cuda")  # "cpu" to try the script where there is no GPU


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


t = time.time()
# The synthetic checkpoint's config.json is the published wrapper; its text_config is the model's.
cfg = json.load(open(os.path.join(d, "config.json")))
tc = Qwen3_5TextConfig(**cfg.get("text_config", cfg))
torch.set_default_dtype(torch.bfloat16)
with torch.device(dev):
    model = Qwen3_5ForCausalLM(tc)
# One shard at a time (4 GB each from synth): all of them at once beside the model did not fit the 27B bf16 shape
# in an H100's 80 GB (call 169).
names, loaded, unexpected = set(model.state_dict()), set(), []
for f in sorted(glob.glob(f"{d}/*.safetensors")):
    sd = {k.replace("model.language_model.", "model."): v for k, v in load_file(f, device=dev).items()}
    r = model.load_state_dict(sd, strict=False)
    unexpected += r.unexpected_keys
    loaded |= set(sd) - set(r.unexpected_keys)
    del sd, r
    if dev == "cuda":
        torch.cuda.empty_cache()
missing = names - loaded
model = model.to(dev, torch.bfloat16).eval()
model.model.rotary_emb = type(model.model.rotary_emb)(config=tc, device=dev)
print(f"peer load {time.time() - t:.1f}s missing={len(missing)} unexpected={len(unexpected)}", flush=True)
ids = torch.tensor([[(i * 7919 + 13) % 240000 for i in range(64)]], device=dev)
with torch.no_grad():
    model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    sync()
    t = time.time()
    model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    sync()
    dt = time.time() - t
    print(f"| transformers {transformers.__version__} + torch {torch.__version__} decode, 1 stream | {n / dt:.1f} tok/s (incl. 64-token prefill) |", flush=True)
    p = torch.tensor([[(i * 7919 + 13) % 240000 for i in range(2048)]], device=dev)
    model(p, use_cache=False)
    sync()
    t = time.time()
    model(p, use_cache=False)
    sync()
    print(f"| transformers prefill 2048 tokens | {2048 / (time.time() - t):.0f} tok/s |", flush=True)
