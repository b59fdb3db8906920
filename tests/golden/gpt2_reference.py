#!/usr/bin/python3
"""A small, readable GPT-2 in PyTorch: the reference the C++ model is checked against.

Architecture (must match the C++ side exactly):
  * token embedding wte [V, C], learned positions wpe [max_seq_len, C]
  * L pre-LN blocks: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
  * final ln_f, logits = ln_f(x) @ wte^T (tied LM head)
  * LayerNorm eps 1e-5 with weight and bias
  * attn: c_attn = Linear(C, 3C) whose output splits as [q | k | v]; each of q, k, v is
    split into heads contiguously (head h = columns h*hs:(h+1)*hs); causal
    softmax(q k^T / sqrt(hs)) v; heads concatenated; c_proj = Linear(C, C)
  * mlp: c_fc = Linear(C, 4C), GeLU (tanh approximation), c_proj = Linear(4C, C)
  * loss: mean cross-entropy over all B*T positions

Weights are in nn.Linear layout [out, in]. Everything is float32.

Importable: `from gpt2_reference import GPT2, GPT2Config, make_optimizer, train_step`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPT2Config:
    layers: int = 2
    d_model: int = 32
    heads: int = 4
    max_seq_len: int = 16
    vocab_size: int = 97


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), written out explicitly."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        assert cfg.d_model % cfg.heads == 0
        self.heads = cfg.heads
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=True)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        nh, hs = self.heads, C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)  # each [B, T, C]
        # head h owns columns h*hs:(h+1)*hs  ->  [B, nh, T, hs]
        q = q.view(B, T, nh, hs).transpose(1, 2)
        k = k.view(B, T, nh, hs).transpose(1, 2)
        v = v.view(B, T, nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # [B, nh, T, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v  # [B, nh, T, hs]
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # concatenate heads
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=True)
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT2(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Parameter(torch.empty(cfg.vocab_size, cfg.d_model))
        self.wpe = nn.Parameter(torch.empty(cfg.max_seq_len, cfg.d_model))
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """normal(0, 0.02) for wte, wpe and Linear weights; the two residual projections
        (attn.c_proj, mlp.c_proj) use 0.02/sqrt(2L); biases 0; LayerNorm weight 1, bias 0.
        Initialisation order is the order of named_parameters()."""
        proj_std = 0.02 / math.sqrt(2 * self.cfg.layers)
        for name, p in self.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            elif name.endswith("attn.c_proj.weight") or name.endswith("mlp.c_proj.weight"):
                p.normal_(0.0, proj_std)
            else:  # wte, wpe, c_attn.weight, c_fc.weight
                p.normal_(0.0, 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        assert T <= self.cfg.max_seq_len
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.wte[idx] + self.wpe[pos]  # [B, T, C]
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = x @ self.wte.t()  # tied head, [B, T, V]
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss

    def num_params(self, non_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wte.numel() + self.wpe.numel()
        return n


def make_optimizer(model: GPT2, lr: float = 1e-3, betas=(0.9, 0.95), eps: float = 1e-8,
                   weight_decay: float = 0.1) -> torch.optim.AdamW:
    """AdamW with decay on 2-D params (wte, wpe, Linear weights), none on biases / LayerNorm."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def train_step(model: GPT2, opt: torch.optim.Optimizer, inputs: torch.Tensor,
               targets: torch.Tensor, grad_clip: float = 1.0) -> float:
    """zero_grad, forward, loss, backward, global-norm clip, step. Returns the pre-update loss."""
    opt.zero_grad(set_to_none=True)
    _, loss = model(inputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return loss.item()
