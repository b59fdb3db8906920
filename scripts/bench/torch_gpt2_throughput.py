#!/usr/bin/python3
"""PyTorch (CPU) side of the GPT-2 (and, with --arch llama, Llama) training-throughput benchmark.

Trains a GPT-2 with AdamW on random tokens: --model idiomatic (default: the fast, straightforward
model a PyTorch user would write, torch_gpt2_idiomatic.py; the benchmark's peer) or --model
reference (tests/golden/gpt2_reference.py, written for clarity to produce golden values), and
reports tokens/s (median over the timed steps), the median step time and, when --peak-gflops is
given, MFU. A training step is: zero_grad, forward, loss, backward, clip_grad_norm_(1.0), step.
--precision bf16 runs the forward and the loss under torch.autocast("cpu", torch.bfloat16), as a
PyTorch user trains in bf16 on a CPU (fp32 master weights; backward follows the forward's dtypes).

FLOPs per token = 6 * (N_nonembedding + d_model * vocab) + 12 * L * d_model * T
  N_nonembedding: parameters other than wte and wpe; the tied LM-head matmul is counted
  because it runs; 12*L*d_model*T is the attention (QK^T and AV) term.

Needs Debian's /usr/bin/python3 with python3-torch.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "golden"))
from gpt2_reference import GPT2, GPT2Config, make_optimizer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2_idiomatic import IdiomaticGPT2  # noqa: E402
from torch_llama_idiomatic import IdiomaticLlama, llama_ffn_hidden  # noqa: E402


def flops_per_token(model, cfg: GPT2Config, seq_len: int) -> int:
    n_nonemb = model.num_params(non_embedding=True)
    return 6 * (n_nonemb + cfg.d_model * cfg.vocab_size) + 12 * cfg.layers * cfg.d_model * seq_len


def make_llama(args):
    kv = args.kv_heads or args.heads
    ffn = llama_ffn_hidden(args.d_model)
    if args.model == "idiomatic":
        return IdiomaticLlama(args.layers, args.d_model, args.heads, kv, args.seq_len, args.vocab, ffn)
    from llama_reference import Llama, LlamaConfig  # noqa: E402  (tests/golden, on the path above)
    ref = Llama(LlamaConfig(layers=args.layers, d_model=args.d_model, heads=args.heads, kv_heads=kv,
                            max_seq_len=args.seq_len, vocab_size=args.vocab, multiple_of=256,
                            ffn_dim_multiplier=0.0, rope_factor=1.0, rope_original_context=1 << 30))
    ref.num_params = lambda non_embedding=False: sum(p.numel() for p in ref.parameters()) - (
        ref.tok_embeddings.weight.numel() + ref.output.weight.numel() if non_embedding else 0)
    return ref


def make_llama_optimizer(model, lr, betas, eps, weight_decay):
    from llama_reference import make_optimizer as llama_optimizer  # noqa: E402
    return llama_optimizer(model, lr, betas, eps, weight_decay)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--steps", type=int, default=6,
                    help="timed steps after warmup (default 6: a step takes ~10 s on 2 cores)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--peak-gflops", type=float, default=None,
                    help="peak FLOP/s of the machine in GFLOP/s; enables MFU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", choices=["idiomatic", "reference"], default="idiomatic",
                    help="idiomatic: what a PyTorch user would run (default); reference: the "
                         "clarity-first golden model")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2",
                    help="llama: RMSNorm, RoPE, SwiGLU (Meta's width rule), --kv-heads, untied head, no biases")
    ap.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0: heads)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: CPU autocast to bfloat16 around the forward and the loss")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be >= 1")

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)

    cfg = GPT2Config(layers=args.layers, d_model=args.d_model, heads=args.heads,
                     max_seq_len=args.seq_len, vocab_size=args.vocab)
    if args.arch == "llama":
        model = make_llama(args)
        opt = model.optimizer(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1) if args.model == "idiomatic" \
            else make_llama_optimizer(model, 1e-3, (0.9, 0.95), 1e-8, 0.1)
    elif args.model == "idiomatic":
        model = IdiomaticGPT2(cfg.layers, cfg.d_model, cfg.heads, cfg.max_seq_len, cfg.vocab_size)
        opt = model.optimizer(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    else:
        model = GPT2(cfg)
        opt = make_optimizer(model, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    model.train()

    B, T = args.batch, args.seq_len
    gen = torch.Generator().manual_seed(args.seed + 1)
    inputs = torch.randint(0, cfg.vocab_size, (B, T), generator=gen)
    targets = torch.randint(0, cfg.vocab_size, (B, T), generator=gen)

    fpt = flops_per_token(model, cfg, T)
    print("flops/token: %d (params %d, non-embedding %d)"
          % (fpt, model.num_params(), model.num_params(non_embedding=True)), file=sys.stderr)

    step_s = []
    loss = float("nan")
    for step in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            out = model(inputs, targets)
        l = out[1] if isinstance(out, tuple) else out
        l.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = l.item()  # synchronises; CPU work is done by here anyway
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            step_s.append(dt)

    med = statistics.median(step_s)
    tokens_per_s = B * T / med
    mfu = None
    if args.peak_gflops:
        mfu = tokens_per_s * fpt / (args.peak_gflops * 1e9)

    if args.json:
        print(json.dumps({"impl": "pytorch-" + args.model, "precision": args.precision, "tokens_per_s": tokens_per_s,
                          "step_ms_median": med * 1e3, "mfu": mfu, "threads": args.threads}))
    else:
        print("pytorch %s: L=%d C=%d heads=%d T=%d B=%d V=%d threads=%d precision=%s"
              % (torch.__version__, cfg.layers, cfg.d_model, cfg.heads, T, B, cfg.vocab_size,
                 args.threads, args.precision))
        print("tokens/s: %.1f" % tokens_per_s)
        print("step ms (median of %d): %.1f" % (len(step_s), med * 1e3))
        print("achieved GFLOP/s: %.2f" % (tokens_per_s * fpt / 1e9))
        if mfu is not None:
            print("MFU: %.2f%% (peak %.1f GFLOP/s)" % (100 * mfu, args.peak_gflops))
        print("final loss: %.4f" % loss)
    return 0


if __name__ == "__main__":
    sys.exit(main())
