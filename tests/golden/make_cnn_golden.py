#!/usr/bin/python3
"""Write (or check) the CNN lanes' golden files: two training steps of resnet18, resnet50 and vgg19
at small shapes (width_divisor 8), for lanes/builtin/cnn/.

  make_cnn_golden.py --output-dir DIR   write DIR/cnn_<arch>.bin for the three models, and
                                        DIR/cnn_<arch>_small.bin (batch 2, 48x48 / 32x32: the emulated
                                        CUDA backend's test, where every kernel runs on the CPU)
  make_cnn_golden.py --check DIR        regenerate in memory; exit 0 if every file is current
                                        (make_gpt2_golden.py's comparison), else print the
                                        differences and exit 1

Each model starts from the lanes' own initial values (cnn_reference.initialise) and trains two
SGD-with-momentum steps (torch.optim.SGD: lr, momentum, weight_decay below) on the lanes' synthetic
images (step k: images 4k .. 4k+3), batch norm in training mode. The reference runs in float64:
the C++ lanes' float32 results are compared to it within tolerances derived from fp32
accumulation (tests/golden/README.md). Format and records: README.md in this folder.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cnn_reference import build, initialise, synthetic_images  # noqa: E402
from make_gpt2_golden import DTYPE_F32, DTYPE_I32, compare, parse, serialize  # noqa: E402

ARCHS = {"resnet18": 0, "resnet50": 1, "vgg19": 2}
BATCH, CLASSES, WIDTH_DIVISOR, SEED, STEPS = 4, 10, 8, 7, 2
IMAGE_SIZE = {"resnet18": 64, "resnet50": 64, "vgg19": 32}  # vgg19 at 32: its 1x1 map pooled up to 7x7
LR, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 1e-4
# ResNet-50 starts with torchvision's zero_init_residual = True: from the default init its gradients
# are so ill-conditioned (norm ~400 at loss 2.4) that PyTorch's own float32 run is 7e-3 away from
# float64 on step 1's gradients and 30% on step 2's parameters, where no float32 tolerance can tell
# a bug from rounding; with it, float32 is within 4e-6 (--compare-fp32 prints both).
ZERO_INIT_RESIDUAL = {"resnet18": False, "resnet50": True, "vgg19": False}

# Parameters whose step-1 gradients and two-step updates are recorded (the first layer, blocks deep
# inside, downsampling paths, batch norm, the classifier), and running statistics after 2 steps.
PARAMS = {
    "resnet18": ["conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
                 "layer3.1.bn1.weight", "layer4.1.conv2.weight", "layer4.1.bn2.bias", "fc.weight", "fc.bias"],
    "resnet50": ["conv1.weight", "bn1.weight", "layer1.0.conv3.weight", "layer1.0.downsample.0.weight",
                 "layer3.5.conv2.weight", "layer3.5.bn3.weight", "layer4.2.bn3.weight", "layer4.2.bn3.bias", "fc.weight", "fc.bias"],
    "vgg19": ["features.0.weight", "features.0.bias", "features.16.weight", "features.34.weight",
              "features.34.bias", "classifier.3.bias", "classifier.6.weight", "classifier.6.bias"],
}
BUFFERS = {
    "resnet18": ["bn1.running_mean", "bn1.running_var", "layer4.1.bn2.running_var"],
    "resnet50": ["bn1.running_mean", "bn1.running_var", "layer4.2.bn3.running_mean"],
    "vgg19": [],
}


# The files: suffix -> (batch, image size per arch). The small set is batch 2 with the resnets at
# 48x48, not 32x32: at 32 their last stage is 1x1, so its batch norms normalise M = 2 values per
# channel, and PyTorch's own float32 run is then 1e-3 (resnet18) to 5e-3 (resnet50) from float64 on
# step 1's gradients (--compare-fp32): no float32 tolerance could tell a bug from rounding. At 48 the
# last stage is 2x2 (M = 8) and float32 is within 1e-5.
VARIANTS = {"": (BATCH, IMAGE_SIZE), "_small": (2, {"resnet18": 48, "resnet50": 48, "vgg19": 32})}


def generate(arch: str, dtype=torch.float64, variant: str = ""):
    """Records (name, dtype, dims, flat values) of two training steps of `arch`, computed in `dtype`."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    batch, sizes = VARIANTS[variant]
    size = sizes[arch]
    model = build(arch, CLASSES, WIDTH_DIVISOR)
    initialise(model, SEED, ZERO_INIT_RESIDUAL[arch])
    model = model.to(dtype).train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    initial = {name: p.detach().clone() for name, p in params.items()}
    records = []

    def add_f32(name, t):
        t = t.detach().to(torch.float32).contiguous()
        records.append((name, DTYPE_F32, list(t.shape), t.reshape(-1).tolist()))

    records.append(("config", DTYPE_I32, [8],
                    [ARCHS[arch], batch, size, CLASSES, WIDTH_DIVISOR, SEED, STEPS, int(ZERO_INIT_RESIDUAL[arch])]))
    add_f32("hparams", torch.tensor([LR, MOMENTUM, WEIGHT_DECAY]))
    losses = []
    for step in range(STEPS):
        images, labels = synthetic_images(SEED, CLASSES, step * batch, batch, size)
        opt.zero_grad(set_to_none=True)
        logits = model(images.to(dtype))
        loss = nn_loss(logits, labels)
        loss.backward()
        if step == 0:
            add_f32("logits", logits)
            for name in PARAMS[arch]:
                add_f32("grad/" + name, params[name].grad)
        opt.step()
        losses.append(loss.item())
    add_f32("losses", torch.tensor(losses))
    # What the two updates moved each parameter by, in float64 before rounding: a float32 parameter
    # after the steps would lose the small change to the rounding of the large value.
    for name in PARAMS[arch]:
        add_f32("update/" + name, params[name] - initial[name])
    for name in BUFFERS[arch]:
        add_f32("buffer/" + name, buffers[name])
    return records


def nn_loss(logits, labels):
    return torch.nn.functional.cross_entropy(logits, labels)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--output-dir", metavar="DIR")
    g.add_argument("--check", metavar="DIR")
    ap.add_argument("--compare-fp32", action="store_true",
                    help="also print how far PyTorch's own float32 run is from the float64 reference")
    args = ap.parse_args(argv)
    status = 0
    for arch, variant in [(a, v) for v in VARIANTS for a in ARCHS]:
        records = generate(arch, variant=variant)
        path = os.path.join(args.output_dir or args.check, "cnn_%s%s.bin" % (arch, variant))
        if args.compare_fp32:
            f32 = {r[0]: r for r in generate(arch, torch.float32, variant)}
            for name, _, _, values in records:
                if name in ("config", "hparams"):
                    continue
                ref = torch.tensor(values, dtype=torch.float64)
                got = torch.tensor(f32[name][3], dtype=torch.float64)
                rel = (got - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
                print("%s %-36s fp32 vs fp64: %.2e" % (arch, name, rel))
        if args.output_dir:
            data = serialize(records)
            with open(path, "wb") as f:
                f.write(data)
            print("wrote %s (%d records, %d bytes)" % (path, len(records), len(data)))
        else:
            with open(path, "rb") as f:
                committed = parse(f.read())
            diffs = compare(committed, [(n, d, dims, v if d == DTYPE_I32 else list(parse(serialize([(n, d, dims, v)]))[0][3]))
                                        for n, d, dims, v in records])
            for d in diffs:
                print("%s: %s" % (path, d))
            status |= 1 if diffs else 0
            if not diffs:
                print("%s is current" % path)
    return status


if __name__ == "__main__":
    sys.exit(main())
