"""PyTorch reference of the CS336 "basics" Transformer, the model of handgrad's cs336-* presets.

token embedding (V, C); L pre-norm blocks
    x = x + attn(RMSNorm(x));  x = x + ffn(RMSNorm(x))
final RMSNorm; an untied output linear (C -> V). RMSNorm has a learned weight and eps 1e-5;
there is no bias anywhere and no dropout. Attention projects q, k, v with one fused (C -> 3C)
linear (rows q | k | v), rotates q and k with RoPE (theta 10000, the rotate-half convention:
dimension i pairs with i + hs/2, as transformers' Llama), runs causal attention and projects
back with a (C -> C) linear. The FFN is SwiGLU, w2(silu(w1 x) * w3 x), with w1 and w3 fused
into one (C -> 2F) linear (rows w1 | w3).

Linear weights are stored as nn.Linear's (out, in). CS336's unfused state dict (q_proj,
k_proj, v_proj, w1, w3 separate) loads through fuse_state_dict().
"""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class CS336Config:
    vocab_size: int   # V
    max_seq_len: int  # Tmax: rows of the RoPE tables
    n_layer: int      # L
    n_head: int       # NH
    d_model: int      # C
    d_ff: int = 0     # F; 0 means 4*C, as hg_config
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self):
        if self.d_ff == 0:
            self.d_ff = 4 * self.d_model
        if self.d_model % self.n_head:
            raise ValueError(f"n_head {self.n_head} does not divide d_model {self.d_model}")
        if (self.d_model // self.n_head) % 2:
            raise ValueError(f"RoPE needs an even head size, not {self.d_model // self.n_head}")

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, in at least float32 (CS336 upcasts half types)."""

    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, self.weight.dtype))
        if hasattr(F, "rms_norm"):  # torch >= 2.4
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps).to(dtype)
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(dtype)


def rope_tables(head_size, max_seq_len, theta=10000.0, dtype=torch.float32):
    """cos, sin (Tmax, hs): angle t / theta^(2i/hs) at columns i and i + hs/2 (rotate-half)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)  # (hs/2)
    ang = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)              # (Tmax, hs/2)
    ang = torch.cat((ang, ang), dim=-1)                                                      # (Tmax, hs)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """x (..., T, hs); cos, sin (T, hs). Pair (i, i + hs/2) rotates by angle t * inv_freq[i]."""
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    """Causal self-attention with RoPE. impl "sdpa" uses F.scaled_dot_product_attention; "math"
    spells out the masked softmax."""

    def __init__(self, cfg, impl):
        super().__init__()
        self.n_head = cfg.n_head
        self.impl = impl
        self.qkv_proj = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)  # (3C, C): q | k | v rows
        self.output_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)   # (C, C)

    def forward(self, x, cos, sin):  # x (B, T, C); cos, sin (T, hs)
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.qkv_proj(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if self.impl == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.output_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.d_ff = cfg.d_ff
        self.w13 = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)  # (2F, C): w1 | w3 rows
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)       # (C, F)

    def forward(self, x):
        a, b = self.w13(x).split(self.d_ff, dim=-1)
        return self.w2(F.silu(a) * b)


class Block(nn.Module):
    def __init__(self, cfg, impl):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, impl)
        self.ln2 = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = SwiGLU(cfg)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.ln1(x), cos, sin)
        return x + self.ffn(self.ln2(x))


class CS336LM(nn.Module):
    """state_dict keys: token_embeddings.weight, layers.{i}.ln1.weight,
    layers.{i}.attn.qkv_proj.weight, layers.{i}.attn.output_proj.weight, layers.{i}.ln2.weight,
    layers.{i}.ffn.w13.weight, layers.{i}.ffn.w2.weight, ln_final.weight, lm_head.weight."""

    def __init__(self, cfg, attn_impl="sdpa"):
        super().__init__()
        if attn_impl not in ("sdpa", "math"):
            raise ValueError(f"attn_impl must be 'sdpa' or 'math', not {attn_impl!r}")
        self.cfg = cfg
        self.token_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)  # (V, C)
        self.layers = nn.ModuleList(Block(cfg, attn_impl) for _ in range(cfg.n_layer))
        self.ln_final = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)  # (V, C), untied
        cos, sin = rope_tables(cfg.d_model // cfg.n_head, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_cs336()

    @torch.no_grad()
    def init_cs336(self, generator=None):
        """CS336's init: linear weights N(0, 2 / (d_in + d_out)) truncated at 3 std, the
        embedding N(0, 1) truncated at 3, RMSNorm weights 1."""
        gen = {"generator": generator} if generator is not None else {}  # torch 1.13 has no generator here
        for name, p in self.named_parameters():
            if name == "token_embeddings.weight":
                nn.init.trunc_normal_(p, 0.0, 1.0, -3.0, 3.0, **gen)
            elif p.dim() >= 2:
                std = math.sqrt(2.0 / (p.shape[0] + p.shape[1]))
                nn.init.trunc_normal_(p, 0.0, std, -3 * std, 3 * std, **gen)
            else:
                p.fill_(1.0)

    def forward(self, tokens, targets=None):
        """tokens (B, T) int64; targets (B, T) with -1 ignored. Returns (logits (B, T, V), loss)."""
        B, T = tokens.shape
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len {self.cfg.max_seq_len}")
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.token_embeddings(tokens)
        for block in self.layers:
            x = block(x, cos, sin)
        logits = self.lm_head(self.ln_final(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1).long(),
                                   ignore_index=-1)
        return logits, loss


def fuse_state_dict(sd):
    """CS336's unfused names (layers.{i}.attn.q_proj/k_proj/v_proj.weight,
    layers.{i}.ffn.w1/w3.weight, the rest as here) -> this module's fused state dict."""
    out = {}
    for k, v in sd.items():
        if k.endswith(("attn.k_proj.weight", "attn.v_proj.weight", "ffn.w3.weight")):
            continue
        if k.endswith("attn.q_proj.weight"):
            pre = k[: -len("q_proj.weight")]
            out[pre + "qkv_proj.weight"] = torch.cat([sd[pre + n + ".weight"] for n in ("q_proj", "k_proj", "v_proj")])
        elif k.endswith("ffn.w1.weight"):
            pre = k[: -len("w1.weight")]
            out[pre + "w13.weight"] = torch.cat([v, sd[pre + "w3.weight"]])
        else:
            out[k] = v
    return out


def param_groups(model, weight_decay):
    """AdamW groups: decay on matrices (embedding, lm_head, the four per block), none on
    RMSNorm weights."""
    params = list(model.parameters())
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def param_count(cfg, with_position_embedding=True):
    """Parameters as hg_config_param_count counts them for a cs336 config: V rows of the
    embedding and of the untied lm_head, no position embedding (RoPE has no parameters;
    the argument is accepted for torch_gpt2.param_count's signature)."""
    C, F_, L = cfg.d_model, cfg.d_ff, cfg.n_layer
    per_layer = C + 3 * C * C + C * C + C + 2 * C * F_ + F_ * C  # ln1, qkv, output, ln2, w1|w3, w2
    return 2 * cfg.vocab_size * C + L * per_layer + C


def train_flops(cfg, B, T):
    """FLOPs of one training step, as hg_train_flops and torch_gpt2.train_flops:
    6*N*tokens + 12*L*C*T*tokens, where N leaves out the untied token embedding (a lookup,
    no FLOPs) and keeps the lm_head. (GPT-2's tied wte is counted once: it is the lm_head.)"""
    tokens = B * T
    n = param_count(cfg, False) - cfg.vocab_size * cfg.d_model
    return 6.0 * n * tokens + 12.0 * cfg.n_layer * cfg.d_model * T * tokens
