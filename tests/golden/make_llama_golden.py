#!/usr/bin/python3
"""Write (or check) the Llama golden reference file tests/golden/llama_tiny.bin.

  make_llama_golden.py --output PATH   write the golden file
  make_llama_golden.py --check PATH    regenerate in memory; exit 0 if PATH is current

The model is llama_reference.py's (Meta's conventions); the records hold Hugging Face's names
and row order. Same file format as the GPT-2 golden file (README.md); its `config` and `hparams`
records are Llama's (below). Needs torch (run with /usr/bin/python3).
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import Llama, LlamaConfig, ffn_hidden, hf_named_tensors, make_optimizer  # noqa: E402
from make_gpt2_golden import DTYPE_F32, DTYPE_I32, REL_TOL, compare, parse, serialize  # noqa: E402

# GQA (4 heads, 2 kv heads, head size 8), RoPE with Llama 3.1 scaling whose four frequencies fall
# in all three regimes (kept, interpolated, divided), an untied head, a vocabulary of 97 (padded
# to 128 by pipelane) and T = 12 < max_seq_len.
CFG = LlamaConfig()
B, T, STEPS = 2, 12, 10
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
MODEL_SEED = 1337
DATA_SEED = 4242


def generate():
    torch.set_num_threads(1)
    try:
        torch.use_deterministic_algorithms(True)
    except Exception:  # pragma: no cover
        pass
    torch.manual_seed(MODEL_SEED)
    model = Llama(CFG)
    gen = torch.Generator().manual_seed(DATA_SEED)
    inputs = torch.randint(0, CFG.vocab_size, (B, T), generator=gen, dtype=torch.long)
    targets = torch.randint(0, CFG.vocab_size, (B, T), generator=gen, dtype=torch.long)
    records = []

    def add_f32(name, t):
        t = t.detach().to(torch.float32).contiguous()
        records.append((name, DTYPE_F32, list(t.shape), t.reshape(-1).tolist()))

    def add_i32(name, t):
        t = t.detach().to(torch.int32).contiguous()
        records.append((name, DTYPE_I32, list(t.shape), t.reshape(-1).tolist()))

    # config: layers, d_model, heads, kv_heads, max_seq_len, vocab_size, ffn_hidden,
    # rope_original_context, B, T, steps
    add_i32("config", torch.tensor([CFG.layers, CFG.d_model, CFG.heads, CFG.kv_heads, CFG.max_seq_len,
                                    CFG.vocab_size, ffn_hidden(CFG), CFG.rope_original_context, B, T, STEPS]))
    # hparams: lr, beta1, beta2, eps, weight_decay, grad_clip, norm_eps, rope_theta, rope_factor,
    # rope_low_freq_factor, rope_high_freq_factor
    add_f32("hparams", torch.tensor([LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP, CFG.norm_eps, CFG.rope_theta,
                                     CFG.rope_factor, CFG.rope_low_freq_factor, CFG.rope_high_freq_factor],
                                    dtype=torch.float64))
    add_i32("inputs", inputs)
    add_i32("targets", targets)
    for name, p in hf_named_tensors(model, grads=False):
        add_f32("param/" + name, p)
    logits, loss = model(inputs, targets)
    loss.backward()
    add_f32("logits", logits)
    add_f32("loss", loss.reshape(1))
    for name, g in hf_named_tensors(model, grads=True):
        add_f32("grad/" + name, g)
    opt = make_optimizer(model, LR, (BETA1, BETA2), EPS, WEIGHT_DECAY)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = model(inputs, targets)
        l.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        losses.append(l.item())
    add_f32("losses", torch.tensor(losses))
    return records


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--output", metavar="PATH")
    g.add_argument("--check", metavar="PATH")
    args = ap.parse_args(argv)
    records = generate()
    blob = serialize(records)
    if args.output:
        with open(args.output, "wb") as f:
            f.write(blob)
        loss = next(r for r in records if r[0] == "loss")[3][0]
        losses = next(r for r in records if r[0] == "losses")[3]
        print("wrote %s (%d bytes, %d records); loss %.6f, losses[%d] %.6f"
              % (args.output, len(blob), len(records), loss, len(losses) - 1, losses[-1]))
        return 0
    with open(args.check, "rb") as f:
        data = f.read()
    if data == blob:
        print("golden file %s is current (byte-identical)" % args.check)
        return 0
    diffs = compare(parse(data), records)
    if diffs:
        print("golden check FAILED: %s is out of date; regenerate with\n"
              "  /usr/bin/python3 tests/golden/make_llama_golden.py --output %s" % (args.check, args.check))
        for d in diffs:
            print("  " + d)
        return 1
    print("golden file %s is current (all values within %g relative)" % (args.check, REL_TOL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
