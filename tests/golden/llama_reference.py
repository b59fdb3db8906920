#!/usr/bin/python3
"""A small Llama in PyTorch, written the way Meta's reference code writes it, as the truth the
C++ Llama family is checked against. Independent of pipelane's C++ and of Hugging Face's code:

  * token embedding tok_embeddings [V, C]; no position table
  * L pre-norm blocks: h = x + attention(attention_norm(x)); out = h + feed_forward(ffn_norm(h))
  * RMSNorm: x * rsqrt(mean(x^2) + eps) * weight
  * attention: wq [C, C], wk and wv [KV * hs, C] (grouped-query: n_kv_heads < n_heads, each kv
    head repeated for n_heads / n_kv_heads query heads), no biases; RoPE on q and k in Meta's
    convention: channel pairs (2i, 2i+1) of each head rotated as complex numbers by
    exp(1j * t * freq_i); causal softmax(q k^T / sqrt(hs)) v; wo [C, C]
  * freq_i = theta^(-2i/hs), with Llama 3.1's apply_scaling (long wavelengths divided by the
    factor, short ones kept, those between interpolated), computed in float64
  * feed_forward: w2(silu(w1(x)) * w3(x)), hidden width by Meta's rule (multiple_of,
    ffn_dim_multiplier)
  * final norm, then an untied output Linear [V, C]; loss: mean cross-entropy

make_llama_golden.py writes the weights under Hugging Face's LlamaForCausalLM names, with wq and
wk permuted into Hugging Face's rotate-half order (the permute() of its conversion script):
pipelane's RoPE is Hugging Face's, so matching this model proves the permutation exact.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    layers: int = 2
    d_model: int = 32
    heads: int = 4
    kv_heads: int = 2
    max_seq_len: int = 16
    vocab_size: int = 97
    multiple_of: int = 32
    ffn_dim_multiplier: float = 1.3
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_factor: float = 8.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_context: int = 1024


def ffn_hidden(cfg: LlamaConfig) -> int:
    hidden = int(2 * (4 * cfg.d_model) / 3)
    if cfg.ffn_dim_multiplier:
        hidden = int(cfg.ffn_dim_multiplier * hidden)
    return cfg.multiple_of * ((hidden + cfg.multiple_of - 1) // cfg.multiple_of)


def scaled_frequencies(cfg: LlamaConfig) -> torch.Tensor:
    hs = cfg.d_model // cfg.heads
    freqs = 1.0 / (cfg.rope_theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    low_wavelen = cfg.rope_original_context / cfg.rope_low_freq_factor
    high_wavelen = cfg.rope_original_context / cfg.rope_high_freq_factor
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / cfg.rope_factor)
        else:
            smooth = (cfg.rope_original_context / wavelen - cfg.rope_low_freq_factor) / (
                cfg.rope_high_freq_factor - cfg.rope_low_freq_factor)
            out.append((1 - smooth) * f / cfg.rope_factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def freqs_cis(cfg: LlamaConfig, T: int) -> torch.Tensor:
    angles = torch.outer(torch.arange(T, dtype=torch.float64), scaled_frequencies(cfg))
    return torch.polar(torch.ones_like(angles), angles).to(torch.complex64)


def apply_rotary_emb(x: torch.Tensor, fc: torch.Tensor) -> torch.Tensor:
    """x [B, T, heads, hs]: pairs (2i, 2i+1) as complex numbers times fc [T, hs/2]."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * fc[None, :, None, :]).flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.heads, self.kv_heads, self.hs = cfg.heads, cfg.kv_heads, cfg.d_model // cfg.heads
        self.wq = nn.Linear(cfg.d_model, self.heads * self.hs, bias=False)
        self.wk = nn.Linear(cfg.d_model, self.kv_heads * self.hs, bias=False)
        self.wv = nn.Linear(cfg.d_model, self.kv_heads * self.hs, bias=False)
        self.wo = nn.Linear(self.heads * self.hs, cfg.d_model, bias=False)

    def forward(self, x, fc):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.heads, self.hs)
        k = self.wk(x).view(B, T, self.kv_heads, self.hs)
        v = self.wv(x).view(B, T, self.kv_heads, self.hs)
        q, k = apply_rotary_emb(q, fc), apply_rotary_emb(k, fc)
        rep = self.heads // self.kv_heads  # repeat_kv
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.hs)
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        att = F.softmax(scores + mask, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        return self.wo(y)


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        hidden = ffn_hidden(cfg)
        self.w1 = nn.Linear(cfg.d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, cfg.d_model, bias=False)
        self.w3 = nn.Linear(cfg.d_model, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, fc):
        h = x + self.attention(self.attention_norm(x), fc)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            else:  # norm weights near 1 but not 1, so a misplaced weight shows in the forward
                with torch.no_grad():
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))

    def forward(self, tokens, targets):
        x = self.tok_embeddings(tokens)
        fc = freqs_cis(self.cfg, tokens.shape[1])
        for layer in self.layers:
            x = layer(x, fc)
        logits = self.output(self.norm(x))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def make_optimizer(model: Llama, lr, betas, eps, weight_decay) -> torch.optim.AdamW:
    """AdamW with decay on the 2-D params (embedding, Linear weights), none on the norms."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps)


def hf_permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Hugging Face's convert_llama_weights_to_hf.py permute(): Meta's interleaved (2i, 2i+1)
    rows of each head -> rotate-half rows (i, i + hs/2)."""
    rows, cols = w.shape
    return w.view(heads, rows // heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def hf_named_tensors(model: Llama, grads: bool):
    """(Hugging Face name, tensor) in LlamaForCausalLM's order: the parameters or their gradients."""
    cfg = model.cfg
    get = (lambda p: p.grad) if grads else (lambda p: p)
    out = [("model.embed_tokens.weight", get(model.tok_embeddings.weight))]
    for i, l in enumerate(model.layers):
        pre = "model.layers.%d." % i
        out += [(pre + "self_attn.q_proj.weight", hf_permute(get(l.attention.wq.weight), cfg.heads)),
                (pre + "self_attn.k_proj.weight", hf_permute(get(l.attention.wk.weight), cfg.kv_heads)),
                (pre + "self_attn.v_proj.weight", get(l.attention.wv.weight)),
                (pre + "self_attn.o_proj.weight", get(l.attention.wo.weight)),
                (pre + "mlp.gate_proj.weight", get(l.feed_forward.w1.weight)),
                (pre + "mlp.up_proj.weight", get(l.feed_forward.w3.weight)),
                (pre + "mlp.down_proj.weight", get(l.feed_forward.w2.weight)),
                (pre + "input_layernorm.weight", get(l.attention_norm.weight)),
                (pre + "post_attention_layernorm.weight", get(l.ffn_norm.weight))]
    out += [("model.norm.weight", get(model.norm.weight)), ("lm_head.weight", get(model.output.weight))]
    return out
