"""torchvision's resnet18, resnet50 and vgg19, written out with torch.nn layers (torchvision itself
is not installed here), and what pipelane's CNN lanes (lanes/builtin/cnn/) start from: the
counter-based random numbers of cnn_random.h, the initial values of cnn_init.h and the synthetic
images of image_source.h, all reproduced bit for bit.

Module and parameter names are torchvision's. `width_divisor` divides every channel count (and
VGG's 4096-wide classifier), as the lanes' option does.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

M64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------
# cnn_random.h

def mix64_int(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix64_array(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def name_key(name: str) -> int:
    h = 0xCBF29CE484222325
    for ch in name.encode("utf-8"):
        h = ((h ^ ch) * 0x100000001B3) & M64
    return h


def uniform_pm1(seed: int, key: int, index: np.ndarray) -> np.ndarray:
    """2 * uniform01 - 1 for each index: exact in float64."""
    base = np.uint64(mix64_int(seed ^ key))
    with np.errstate(over="ignore"):
        h = mix64_array(index.astype(np.uint64) + base)
    u = (h >> np.uint64(40)).astype(np.float64) * 2.0 ** -24
    return 2.0 * u - 1.0


# ---------------------------------------------------------------------------------------------
# models

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)  # stride on the 3x3: "v1.5"
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes * 4:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes * 4))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block, layers, classes: int, d: int):
        super().__init__()
        self.inplanes = 64 // d
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._layer(block, 64 // d, layers[0], 1)
        self.layer2 = self._layer(block, 128 // d, layers[1], 2)
        self.layer3 = self._layer(block, 256 // d, layers[2], 2)
        self.layer4 = self._layer(block, 512 // d, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 // d * block.expansion, classes)

    def _layer(self, block, planes, blocks, stride):
        layers = []
        for i in range(blocks):
            layers.append(block(self.inplanes, planes, stride if i == 0 else 1))
            self.inplanes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


VGG19_CFG = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]


class VGG(nn.Module):
    def __init__(self, classes: int, d: int, dropout: float):
        super().__init__()
        layers, c = [], 3
        for v in VGG19_CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v // d, 3, padding=1), nn.ReLU(inplace=True)]
                c = v // d
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        h = 4096 // d
        self.classifier = nn.Sequential(nn.Linear(c * 49, h), nn.ReLU(True), nn.Dropout(dropout),
                                        nn.Linear(h, h), nn.ReLU(True), nn.Dropout(dropout), nn.Linear(h, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build(arch: str, classes: int, d: int, dropout: float = 0.0) -> nn.Module:
    if arch == "resnet18":
        return ResNet(BasicBlock, [2, 2, 2, 2], classes, d)
    if arch == "resnet50":
        return ResNet(Bottleneck, [3, 4, 6, 3], classes, d)
    if arch == "vgg19":
        return VGG(classes, d, dropout)
    raise ValueError(arch)


# ---------------------------------------------------------------------------------------------
# cnn_init.h: torchvision's schemes, uniform with each scheme's standard deviation

def initialise(model: nn.Module, seed: int, zero_init_residual: bool = False) -> None:
    """zero_init_residual: torchvision's option, the last batch norm of each residual block starts at 0."""
    vgg = isinstance(model, VGG)
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, p in model.named_parameters():
            module = modules[name.rsplit(".", 1)[0]]
            is_weight = name.endswith(".weight")
            if isinstance(module, nn.BatchNorm2d):
                p.fill_(0.0 if (is_weight and zero_init_residual and _last_bn_of_block(modules, name)) else
                        1.0 if is_weight else 0.0)
                continue
            if isinstance(module, nn.Conv2d):
                if not is_weight:
                    p.zero_()
                    continue
                fan_out = p.shape[0] * p.shape[2] * p.shape[3]
                bound = math.sqrt(3.0) * math.sqrt(2.0 / fan_out)
            elif vgg:  # the classifier: N(0, 0.01), bias 0
                if not is_weight:
                    p.zero_()
                    continue
                bound = math.sqrt(3.0) * 0.01
            else:  # nn.Linear's default, weight and bias: fan_in of the weight
                bound = 1.0 / math.sqrt(float(module.weight.shape[1]))
            u = uniform_pm1(seed, name_key(name), np.arange(p.numel(), dtype=np.uint64))
            p.copy_(torch.from_numpy((u * bound).astype(np.float32)).reshape(p.shape))


def _last_bn_of_block(modules, name: str) -> bool:
    block = modules[name.rsplit(".", 2)[0]]
    return (isinstance(block, Bottleneck) and name.endswith(".bn3.weight")) or \
        (isinstance(block, BasicBlock) and name.endswith(".bn2.weight"))


# image_source.h's synthetic images: image i has label i mod classes

def synthetic_images(seed: int, classes: int, first: int, count: int, size: int):
    idx = np.arange(3 * size * size, dtype=np.uint64)
    images, labels = [], []
    for image in range(first, first + count):
        label = image % classes
        t = uniform_pm1(seed, name_key("synthetic.class") ^ mix64_int(label), idx)
        z = uniform_pm1(seed, name_key("synthetic.image") ^ mix64_int(image), idx)
        images.append((0.5 * t + 0.5 * z).astype(np.float32).reshape(3, size, size))
        labels.append(label)
    return torch.from_numpy(np.stack(images)), torch.tensor(labels, dtype=torch.long)
