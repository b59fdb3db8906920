"""The GPT-2 a PyTorch user would write for speed on a CPU (torch 1.13): nn.Embedding, nn.Linear,
nn.LayerNorm, F.gelu(approximate='tanh'), batched matmuls with a cached causal mask, tied head,
F.cross_entropy. Same shapes, initialisation scale, AdamW and clipping as pipelane. This is the
benchmark's peer; tests/golden/gpt2_reference.py stays the clarity-first model golden values come
from (explicit tanh GeLU, indexing for embeddings), which is ~2.7x slower and no fair peer."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, max_seq_len: int):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d_model)
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.mlp_proj = nn.Linear(4 * d_model, d_model)
        mask = torch.full((max_seq_len, max_seq_len), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs)) + self.mask[:T, :T]
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class IdiomaticGPT2(nn.Module):
    def __init__(self, layers: int, d_model: int, heads: int, max_seq_len: int, vocab_size: int):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(max_seq_len, d_model)
        self.h = nn.ModuleList(Block(d_model, heads, max_seq_len) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():  # GPT-2 initialisation
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") or name.endswith(
                    "mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))

    def optimizer(self, lr: float, betas, eps: float, weight_decay: float) -> torch.optim.Optimizer:
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}],
                                 lr=lr, betas=betas, eps=eps)

    def num_params(self, non_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())  # the tied head counts once
        if non_embedding:
            n -= self.wte.weight.numel() + self.wpe.weight.numel()
        return n
