"""PyTorch reference GPT-2 for handgrad: the same model, parameter names and layouts as the C engine."""
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int   # V
    max_seq_len: int  # Tmax
    n_layer: int      # L
    n_head: int       # NH
    d_model: int      # C
    d_ff: int = 0     # F; 0 means 4*C, as in hg_config
    dropout: float = 0.0

    def __post_init__(self):
        if self.d_ff == 0:
            self.d_ff = 4 * self.d_model
        if self.d_model % self.n_head:
            raise ValueError(f"n_head {self.n_head} does not divide d_model {self.d_model}")

    def to_dict(self):
        return asdict(self)


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: y = x @ weight + bias with weight (in, out), input-major."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))  # (in, out)
        self.bias = nn.Parameter(torch.zeros(n_out))           # (out)

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], -1)


class Attention(nn.Module):
    """Causal self-attention. impl "sdpa" uses F.scaled_dot_product_attention (the fast CPU
    path); "math" spells out masked softmax, for readable float64 references."""

    def __init__(self, cfg, impl):
        super().__init__()
        self.n_head = cfg.n_head
        self.impl = impl
        self.c_attn = Conv1D(cfg.d_model, 3 * cfg.d_model)  # (C, 3C): q | k | v columns
        self.c_proj = Conv1D(cfg.d_model, cfg.d_model)      # (C, C)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x):  # x (B, T, C)
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        # Head h owns columns h*hs..(h+1)*hs of each of q, k, v.
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, hs)
        if self.impl == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, NH, T, T)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads back in head order
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg.d_model, cfg.d_ff)    # (C, F)
        self.c_proj = Conv1D(cfg.d_ff, cfg.d_model)  # (F, C)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, cfg, impl):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.attn = Attention(cfg, impl)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """GPT-2 with a tied lm_head. state_dict keys are the Hugging Face names used by
    handgrad (wte.weight, h.0.attn.c_attn.weight, ..., ln_f.bias)."""

    def __init__(self, cfg, attn_impl="sdpa"):
        super().__init__()
        if attn_impl not in ("sdpa", "math"):
            raise ValueError(f"attn_impl must be 'sdpa' or 'math', not {attn_impl!r}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)   # (V, C)
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.d_model)  # (Tmax, C)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList(Block(cfg, attn_impl) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=1e-5)
        self.init_gpt2()

    @torch.no_grad()
    def init_gpt2(self, generator=None):
        """GPT-2 init as hg_model_create does it: N(0, 0.02), residual projections scaled
        by 1/sqrt(2L), LayerNorm weight 1, biases 0."""
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                scale = 1 / math.sqrt(2 * self.cfg.n_layer) if name.endswith("c_proj.weight") else 1.0
                p.normal_(0.0, std * scale, generator=generator)
            elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                p.fill_(1.0)
            else:
                p.zero_()

    def forward(self, tokens, targets=None):
        """tokens (B, T) int64; targets (B, T) with -1 ignored. Returns (logits (B, T, V), loss)."""
        B, T = tokens.shape
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds max_seq_len {self.cfg.max_seq_len}")
        pos = torch.arange(T, device=tokens.device)
        x = self.drop(self.wte(tokens) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1).long(),
                                   ignore_index=-1)
        return logits, loss


def param_groups(model, weight_decay):
    """AdamW groups: decay on tensors with dim >= 2 (wte, wpe, the four matrices per block),
    none on LayerNorm weights and biases."""
    params = list(model.parameters())
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def param_count(cfg, with_position_embedding=True):
    """Parameters counted as hg_config_param_count does (tied wte counted once, V rows)."""
    C, F_, L = cfg.d_model, cfg.d_ff, cfg.n_layer
    per_layer = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * F_ + F_) + (F_ * C + C)
    n = cfg.vocab_size * C + L * per_layer + 2 * C
    return n + (cfg.max_seq_len * C if with_position_embedding else 0)


def train_flops(cfg, B, T):
    """FLOPs of one training step, as hg_train_flops: 6*N*tokens + 12*L*C*T*tokens, N without wpe."""
    tokens = B * T
    return 6.0 * param_count(cfg, False) * tokens + 12.0 * cfg.n_layer * cfg.d_model * T * tokens
