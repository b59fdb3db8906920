#!/usr/bin/python3
"""Checks a `pipelane export` directory against pipelane's own logits.

usage: check_hf_gpt2_export.py HF_DIR TOKENS.bin B T LOGITS.bin

Reads model.safetensors (parsed by hand: no safetensors package needed) and config.json, builds a
small GPT-2 *in Hugging Face's layout* (GPT2LMHeadModel's module names, Conv1D weights [in, out],
tied lm_head, gelu_new, LayerNorm eps from the config), runs it on the int32 tokens [B, T] and
compares with pipelane's float32 logits [B*T, vocab]: max |a - b| / max |b| <= 1e-4.
Every tensor GPT2LMHeadModel expects must be present with the expected shape.
Exit 0: match; 1: mismatch; 77: torch is missing (the test skips).
"""
import json
import math
import struct
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    print("torch is not installed for /usr/bin/python3: skipping the export check")
    sys.exit(77)


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"]) if info["shape"] else t
    return out


def expected_shapes(cfg):
    C, V, P, L = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"]
    inner = cfg.get("n_inner") or 4 * C
    s = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C],
         "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
    for l in range(L):
        h = f"transformer.h.{l}."
        s.update({h + "ln_1.weight": [C], h + "ln_1.bias": [C],
                  h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
                  h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C],
                  h + "ln_2.weight": [C], h + "ln_2.bias": [C],
                  h + "mlp.c_fc.weight": [C, inner], h + "mlp.c_fc.bias": [inner],
                  h + "mlp.c_proj.weight": [inner, C], h + "mlp.c_proj.bias": [C]})
    return s


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def conv1d(x, w, b):  # Hugging Face's Conv1D: x @ W + b with W [in, out]
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[1])


def gpt2_logits(sd, cfg, tokens):
    B, T = tokens.shape
    C, nh, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hs = C // nh
    x = sd["transformer.wte.weight"][tokens] + sd["transformer.wpe.weight"][:T][None]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(cfg["n_layer"]):
        p = lambda n: sd[f"transformer.h.{l}.{n}"]
        h = F.layer_norm(x, (C,), p("ln_1.weight"), p("ln_1.bias"), eps)
        q, k, v = conv1d(h, p("attn.c_attn.weight"), p("attn.c_attn.bias")).split(C, dim=2)
        q, k, v = (t.view(B, T, nh, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(y, p("attn.c_proj.weight"), p("attn.c_proj.bias"))
        h = F.layer_norm(x, (C,), p("ln_2.weight"), p("ln_2.bias"), eps)
        h = gelu_new(conv1d(h, p("mlp.c_fc.weight"), p("mlp.c_fc.bias")))
        x = x + conv1d(h, p("mlp.c_proj.weight"), p("mlp.c_proj.bias"))
    x = F.layer_norm(x, (C,), sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"], eps)
    lm_head = sd.get("lm_head.weight", sd["transformer.wte.weight"])  # tied
    return x @ lm_head.T


def main():
    hf_dir, tokens_path, B, T, logits_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    with open(f"{hf_dir}/config.json") as f:
        cfg = json.load(f)
    assert cfg["model_type"] == "gpt2" and cfg["activation_function"] == "gelu_new", cfg
    assert cfg.get("tie_word_embeddings", True)
    sd = load_safetensors(f"{hf_dir}/model.safetensors")
    want = expected_shapes(cfg)
    missing = sorted(set(want) - set(sd))
    extra = sorted(set(sd) - set(want) - {"lm_head.weight"})
    assert not missing, f"missing tensors: {missing}"
    assert not extra, f"unexpected tensors: {extra}"
    for n, s in want.items():
        assert list(sd[n].shape) == s, f"{n}: shape {list(sd[n].shape)}, GPT2LMHeadModel expects {s}"
    tokens = torch.frombuffer(bytearray(open(tokens_path, "rb").read()), dtype=torch.int32).long().reshape(B, T)
    ours = torch.frombuffer(bytearray(open(logits_path, "rb").read()), dtype=torch.float32)
    ours = ours.reshape(B * T, cfg["vocab_size"]).double()
    with torch.no_grad():
        ref = gpt2_logits({k: v.double() for k, v in sd.items()}, cfg, tokens).reshape(B * T, -1)
    rel = ((ours - ref).abs().max() / ref.abs().max()).item()
    print(f"{len(sd)} tensors in GPT2LMHeadModel layout; logits [{B * T}, {cfg['vocab_size']}]: "
          f"max relative difference {rel:.3g}")
    sys.exit(0 if rel <= 1e-4 else 1)


if __name__ == "__main__":
    main()
