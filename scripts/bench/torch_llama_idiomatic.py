"""The Llama a PyTorch user would write for speed on a CPU (torch 1.13): nn.Embedding, nn.Linear
without biases, an RMSNorm module, RoPE (rotate-half, cos/sin cached), grouped-query attention by
repeat_interleave of the kv heads, batched matmuls with a cached causal mask and softmax (torch 1.13
has no F.scaled_dot_product_attention), F.silu SwiGLU, an untied head, F.cross_entropy. Same shapes,
initialisation scale, AdamW and clipping as pipelane. The benchmark's peer for --arch llama;
tests/golden/llama_reference.py is the clarity-first (Meta-style, complex-number RoPE) model."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def llama_ffn_hidden(d_model: int, multiple_of: int = 256, multiplier: float = 0.0) -> int:
    hidden = int(2 * 4 * d_model / 3)
    if multiplier:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int, kv_heads: int, ffn: int, max_seq_len: int):
        super().__init__()
        self.heads, self.kv_heads, self.hs = heads, kv_heads, d_model // heads
        self.input_layernorm = RMSNorm(d_model)
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, kv_heads * self.hs, bias=False)
        self.v_proj = nn.Linear(d_model, kv_heads * self.hs, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self.post_attention_layernorm = RMSNorm(d_model)
        self.gate_proj = nn.Linear(d_model, ffn, bias=False)
        self.up_proj = nn.Linear(d_model, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d_model, bias=False)
        mask = torch.full((max_seq_len, max_seq_len), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.heads, self.hs).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.kv_heads, self.hs).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.kv_heads, self.hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs)) + self.mask[:T, :T]
        y = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class IdiomaticLlama(nn.Module):
    def __init__(self, layers: int, d_model: int, heads: int, kv_heads: int, max_seq_len: int, vocab_size: int,
                 ffn: int, rope_theta: float = 10000.0):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(Block(d_model, heads, kv_heads, ffn, max_seq_len) for _ in range(layers))
        self.norm = RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        hs = d_model // heads
        inv = 1.0 / (rope_theta ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
        freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for p in self.parameters():  # Hugging Face's Llama initialisation
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for block in self.layers:
            x = block(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))

    def optimizer(self, lr: float, betas, eps: float, weight_decay: float) -> torch.optim.Optimizer:
        decay = [p for p in self.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps)

    def num_params(self, non_embedding: bool = False) -> int:
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:  # the embedding and the head (counted once in the FLOPs, as it runs)
            n -= self.embed_tokens.weight.numel() + self.lm_head.weight.numel()
        return n
