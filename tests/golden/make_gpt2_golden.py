#!/usr/bin/python3
"""Write (or check) the GPT-2 golden reference file tests/golden/gpt2_tiny.bin.

  make_gpt2_golden.py --output PATH   write the golden file
  make_gpt2_golden.py --check PATH    regenerate in memory; exit 0 if PATH is current
                                      (byte-identical, or same names/dtypes/shapes/ints and
                                      all floats within 1e-6 relative), else print what
                                      differs and exit 1

Format: see README.md in this folder. Needs torch (run with /usr/bin/python3).
"""
from __future__ import annotations

import argparse
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import GPT2, GPT2Config, make_optimizer  # noqa: E402

MAGIC = b"PLGOLDEN"
VERSION = 1
DTYPE_F32 = 0
DTYPE_I32 = 1

# The tiny configuration. vocab 97 is deliberately not a multiple of 64 (the C++ model pads
# the vocab to 128 internally) and T = 12 < max_seq_len on purpose.
CFG = GPT2Config(layers=2, d_model=32, heads=4, max_seq_len=16, vocab_size=97)
B, T, STEPS = 2, 12, 10
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0
MODEL_SEED = 1337
DATA_SEED = 4242

REL_TOL = 1e-6


# ---------------------------------------------------------------------------------------------
# generation

def generate() -> list[tuple[str, int, list[int], list]]:
    """Returns the records as (name, dtype, dims, flat values) in file order."""
    torch.set_num_threads(1)
    try:
        torch.use_deterministic_algorithms(True)
    except Exception:  # pragma: no cover - older / odd builds
        pass
    torch.set_default_dtype(torch.float32)

    torch.manual_seed(MODEL_SEED)
    model = GPT2(CFG)
    gen = torch.Generator().manual_seed(DATA_SEED)
    inputs = torch.randint(0, CFG.vocab_size, (B, T), generator=gen, dtype=torch.long)
    targets = torch.randint(0, CFG.vocab_size, (B, T), generator=gen, dtype=torch.long)

    records: list[tuple[str, int, list[int], list]] = []

    def add_f32(name: str, t: torch.Tensor) -> None:
        t = t.detach().to(torch.float32).contiguous()
        records.append((name, DTYPE_F32, list(t.shape), t.reshape(-1).tolist()))

    def add_i32(name: str, t: torch.Tensor) -> None:
        t = t.detach().to(torch.int32).contiguous()
        records.append((name, DTYPE_I32, list(t.shape), t.reshape(-1).tolist()))

    add_i32("config", torch.tensor([CFG.layers, CFG.d_model, CFG.heads, CFG.max_seq_len,
                                    CFG.vocab_size, B, T, STEPS]))
    add_f32("hparams", torch.tensor([LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP]))
    add_i32("inputs", inputs)
    add_i32("targets", targets)

    params = list(model.named_parameters())
    for name, p in params:
        add_f32("param/" + name, p)

    # initial forward / backward (gradients are recorded before clipping)
    logits, loss = model(inputs, targets)
    loss.backward()
    add_f32("logits", logits)
    add_f32("loss", loss.reshape(1))
    for name, p in params:
        add_f32("grad/" + name, p.grad)

    # 10 AdamW steps on the same batch; losses[k] is the loss before update k
    opt = make_optimizer(model, lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WEIGHT_DECAY)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = model(inputs, targets)
        l.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        losses.append(l.item())
    add_f32("losses", torch.tensor(losses, dtype=torch.float32))
    return records


def serialize(records) -> bytes:
    out = bytearray()
    out += MAGIC
    out += struct.pack("<II", VERSION, len(records))
    for name, dtype, dims, values in records:
        nb = name.encode("utf-8")
        out += struct.pack("<I", len(nb)) + nb
        out += struct.pack("<II", dtype, len(dims))
        out += struct.pack("<%dq" % len(dims), *dims)
        fmt = "f" if dtype == DTYPE_F32 else "i"
        out += struct.pack("<%d%s" % (len(values), fmt), *values)
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# parsing (used by --check)

def parse(data: bytes):
    """Parses a golden file; returns a list of (name, dtype, dims, values). Raises ValueError."""
    pos = 0

    def take(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(data):
            raise ValueError("truncated file at offset %d (need %d bytes, have %d)"
                             % (pos, n, len(data) - pos))
        b = data[pos:pos + n]
        pos += n
        return b

    if take(8) != MAGIC:
        raise ValueError("bad magic (not a PLGOLDEN file)")
    version, n = struct.unpack("<II", take(8))
    if version != VERSION:
        raise ValueError("unsupported version %d (expected %d)" % (version, VERSION))
    records = []
    for _ in range(n):
        (name_len,) = struct.unpack("<I", take(4))
        name = take(name_len).decode("utf-8")
        dtype, ndim = struct.unpack("<II", take(8))
        if dtype not in (DTYPE_F32, DTYPE_I32):
            raise ValueError("record %r: unknown dtype %d" % (name, dtype))
        dims = list(struct.unpack("<%dq" % ndim, take(8 * ndim)))
        numel = 1
        for d in dims:
            numel *= d
        fmt = "f" if dtype == DTYPE_F32 else "i"
        values = list(struct.unpack("<%d%s" % (numel, fmt), take(4 * numel)))
        records.append((name, dtype, dims, values))
    if pos != len(data):
        raise ValueError("%d trailing bytes after the last record" % (len(data) - pos))
    return records


def compare(committed, fresh) -> list[str]:
    """Returns a list of human-readable differences (empty when equivalent)."""
    diffs: list[str] = []
    names_c = [r[0] for r in committed]
    names_f = [r[0] for r in fresh]
    if names_c != names_f:
        diffs.append("record names/order differ:\n  file:  %s\n  fresh: %s" % (names_c, names_f))
        return diffs
    for (name, dt_c, dims_c, v_c), (_, dt_f, dims_f, v_f) in zip(committed, fresh):
        if dt_c != dt_f:
            diffs.append("%s: dtype %d in file, %d fresh" % (name, dt_c, dt_f))
            continue
        if dims_c != dims_f:
            diffs.append("%s: shape %s in file, %s fresh" % (name, dims_c, dims_f))
            continue
        if dt_c == DTYPE_I32:
            bad = [i for i, (a, b) in enumerate(zip(v_c, v_f)) if a != b]
            if bad:
                i = bad[0]
                diffs.append("%s: %d int values differ (first at %d: file %d, fresh %d)"
                             % (name, len(bad), i, v_c[i], v_f[i]))
        else:
            worst, worst_i, nbad = 0.0, -1, 0
            for i, (a, b) in enumerate(zip(v_c, v_f)):
                if a == b:
                    continue
                rel = abs(a - b) / max(abs(a), abs(b))
                if rel > REL_TOL:
                    nbad += 1
                    if rel > worst:
                        worst, worst_i = rel, i
            if nbad:
                diffs.append("%s: %d float values differ by more than %g relative "
                             "(worst at %d: file %r, fresh %r, rel %.3g)"
                             % (name, nbad, REL_TOL, worst_i, v_c[worst_i], v_f[worst_i], worst))
    return diffs


# ---------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--output", metavar="PATH", help="write the golden file to PATH")
    g.add_argument("--check", metavar="PATH", help="check that PATH is current")
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

    try:
        with open(args.check, "rb") as f:
            data = f.read()
    except OSError as e:
        print("golden check FAILED: cannot read %s: %s" % (args.check, e))
        return 1
    if data == blob:
        print("golden file %s is current (byte-identical)" % args.check)
        return 0
    try:
        committed = parse(data)
    except ValueError as e:
        print("golden check FAILED: %s: %s" % (args.check, e))
        return 1
    diffs = compare(committed, records)
    if diffs:
        print("golden check FAILED: %s is out of date; regenerate with\n"
              "  /usr/bin/python3 tests/golden/make_gpt2_golden.py --output %s\ndifferences:"
              % (args.check, args.check))
        for d in diffs:
            print("  " + d)
        return 1
    print("golden file %s is current (bytes differ, all values within %g relative)"
          % (args.check, REL_TOL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
