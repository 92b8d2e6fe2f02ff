"""Writes the Llama-family safetensors fixtures in tests/fixtures/ that the C tests compare against.

The reference is transformers' own LlamaForCausalLM (llama_gqa: grouped-query attention,
untied, no biases), Qwen2ForCausalLM (qwen2_bias: q/k/v bias, tied), Qwen3ForCausalLM
(qwen3_qknorm: RMSNorm of each q and k head, head_dim above hidden/heads, tied),
GemmaForCausalLM (gemma_geglu: GeGLU, embeddings times sqrt(hidden), (1 + w) norms,
multi-query attention, tied), Gemma2ForCausalLM (gemma2_sandwich: Gemma's plus a norm on
each sublayer's output, the sandwich block, final_logit_softcapping and
attn_logit_softcapping (both caps bend what they cap), query_pre_attn_scalar = head_dim, a sliding window no shorter than the sequence),
Phi3ForCausalLM (phi3_partial: fused qkv_proj and gate_up_proj, rotary embedding on
half of each head, untied), Olmo2ForCausalLM (olmo2_postnorm: the postnorm block, a norm
on each sublayer's output and none on its input, q and k RMS-normalised over their whole
width, grouped-query attention, untied) and PhiForCausalLM (phi2_parallel: Phi-2's
parallel block, attention and a GELU MLP reading one LayerNorm, biases on every linear,
the LayerNorms and the output layer, 12 of each head's 32 dims rotated, untied), and on
packed rows (draw_packed_batch: documents with positions restarting at 0, a loss mask)
LlamaForCausalLM (llama_packed: llama_gqa's model), Gemma2ForCausalLM (gemma2_packed:
gemma2_sandwich's, with a window of 6 on layer 0, which cuts its documents; layer 1 full)
and MistralForCausalLM (mistral_window: llama_gqa's sizes, a window of 7 on both layers,
one row a single document, one packed),
attn_implementation "eager", run in float64
(model.to(torch.float64)) from float32-drawn parameters: weights and biases N(0, 0.02),
norm weights 1 + N(0, 0.1) as handgrad holds them (Gemma's stored offsets w are then
N(0, 0.1)), drawn in handgrad's layout from a fixed seed.
Even in a float64 model, transformers rounds RMSNorm's normalize, the rotary cos/sin and the
eager softmax through float32 (and its labels loss too). The reference runs those three
functions with only the casts removed (Phi's nn.LayerNorm has none), computes the loss
itself from targets already aligned with tokens (no shift), and checks that stock
transformers agrees to float32 rounding and that a forward written from the layout table
and handgrad's config switches below agrees to 1e-12. Packed, the reference passes
position_ids = positions and explicit additive masks (0 / -inf; Gemma 2: a dict of the
"full_attention" and "sliding_attention" ones); stock transformers gets position_ids and
no attention_mask, builds its packed-sequence masks itself, and each layer's must be
handgrad's.
Usage: python3 tools/gen_llama_fixture.py [--out-dir tests/fixtures]
           [--only llama_gqa|qwen2_bias|qwen3_qknorm|gemma_geglu|gemma2_sandwich|phi3_partial|
                   olmo2_postnorm|phi2_parallel|llama_packed|gemma2_packed|mistral_window]

Contents of each file (little-endian, row-major):
  tokens, targets        I32 (B, T); a target of -1 is ignored
  positions              I32 (B, T), packed fixtures only: the position of each token in its
                         document (0 starts one, else the previous + 1); rotary angles use it
  param.<name>           F32, the initial parameters, handgrad names and layouts (below)
  logits                 F64 (B, T, V);  loss F64 (1,), the mean over non-ignored targets
  grad.<name>            F64, gradient of that mean loss
  adamw.losses           F64 (10,), loss before update k;  adamw.grad_norms F64 (10,), pre-clip
  final.<name>           F64, parameters after the 10 updates
  __metadata__ (strings) config (handgrad's config keys), adamw (JSON), batch, seq_len,
                         generator, hf_class, torch_version, transformers_version;
                         with a window that cuts, config has sliding_window W, window_period
                         P and window_first_layer F (Gemma 2: 2, 0; Mistral: 0, 0)
The updates are torch.nn.utils.clip_grad_norm_ (grads *= min(1, clip / (norm + 1e-6)))
then torch.optim.AdamW(foreach=False), with decay on the tensors of dim >= 2 only; the clip
is a 4-significant-bit value near the median unclipped norm that clips some steps, not all,
with no pre-clip norm within 0.1% of it.

handgrad names and layouts, in handgrad's order. Every linear weight is input-major
(in, out), the transpose of nn.Linear's (out, in). C hidden, QD = NH*hs, KVD = NKV*hs,
F intermediate, V vocab; transformers names below are under model.layers.{l}. in a block:
  wte.weight               (V, C)          model.embed_tokens.weight
  h.{l}.ln_1.weight        (C)             input_layernorm.weight  (not OLMo 2)
  h.{l}.ln_1.bias          (C)             input_layernorm.bias  (Phi-2 only)
  h.{l}.attn.c_attn.weight (C, QD+2*KVD)   cat([q_proj, k_proj, v_proj].weight, 0).T;
                                           Phi-3: self_attn.qkv_proj.weight.T (q | k | v)
  h.{l}.attn.c_attn.bias   (QD+2*KVD)      cat([q_proj, k_proj, v_proj].bias)  (Qwen2, Phi-2)
  h.{l}.attn.q_norm.weight (hs)            self_attn.q_norm.weight  (Qwen3; OLMo 2: (QD))
  h.{l}.attn.k_norm.weight (hs)            self_attn.k_norm.weight  (Qwen3; OLMo 2: (KVD))
  h.{l}.attn.c_proj.weight (QD, C)         o_proj.weight.T;  Phi-2: self_attn.dense.weight.T
  h.{l}.attn.c_proj.bias   (C)             self_attn.dense.bias  (Phi-2 only)
  h.{l}.attn.post_norm.weight (C)          post_attention_layernorm.weight  (Gemma 2 and
                                           OLMo 2: their norm of the attention output)
  h.{l}.ln_2.weight        (C)             post_attention_layernorm.weight;
                                           Gemma 2: pre_feedforward_layernorm.weight
                                           (none in OLMo 2 and Phi-2)
  h.{l}.mlp.c_fc.weight    (C, 2F)         cat([gate_proj, up_proj].weight, 0).T (gate | up);
                                           Phi-3: gate_up_proj.weight.T (gate | up);
                                           Phi-2: (C, F) mlp.fc1.weight.T
  h.{l}.mlp.c_fc.bias      (F)             mlp.fc1.bias  (Phi-2 only)
  h.{l}.mlp.c_proj.weight  (F, C)          down_proj.weight.T;  Phi-2: mlp.fc2.weight.T
  h.{l}.mlp.c_proj.bias    (C)             mlp.fc2.bias  (Phi-2 only)
  h.{l}.mlp.post_norm.weight (C)           post_feedforward_layernorm.weight  (Gemma 2, OLMo 2)
  ln_f.weight              (C)             model.norm.weight;  Phi-2: model.final_layernorm.weight
  ln_f.bias                (C)             model.final_layernorm.bias  (Phi-2 only)
  lm_head.weight           (V, C)          lm_head.weight (untied only; tied: wte is the
                                           output matrix and its gradient sums both uses)
  lm_head.bias             (V)             lm_head.bias  (Phi-2 only)
Gemma's and Gemma 2's RMSNorm computes x * rstd * (1 + w) and handgrad's x * rstd * w, so
every norm weight there is 1 + the transformers weight (the gradients are the same).
Columns of c_attn are q heads, then k heads, then v heads, hs each; query head h attends
with key/value head h // (NH / NKV); scores are scaled by 1/sqrt(hs). Token i attends to
keys j with i - positions[i] <= j <= i (positions: 0..T-1 without the tensor) and, on a
layer that slides, j > i - W: W keys, its own included; layer l slides when W > 0, l >= F
and (P <= 1 or l % P != P - 1). RoPE rotates pairs
(i, i + r/2) of the first r dims of each q and k head by positions[t] times the frequencies
theta^(-2i/r), r = hs
or the config's rotary_dim (Phi-3, Phi-2: int(hs * partial_rotary_factor)), the rest
passing through, after the q/k norm: Qwen3's an RMSNorm over each head's hs values,
OLMo 2's (qk_norm_whole) over all of q's QD values and all of k's KVD. The config
switches: mlp geglu is gelu_tanh(gate) * up, mlp gelu gelu_tanh(c_fc(x)); norm layernorm
is (x - mean) * rstd * w + b; embed_scale multiplies the token embeddings on the way in;
logit_softcap c gives logits c * tanh(logits / c); lm_head_bias adds lm_head.bias to
them. The blocks (A attention, M MLP, n a norm with its own weights):
  prenorm   x = x + A(n(x)); x = x + M(n(x))
  sandwich  x = x + n(A(n(x))); x = x + n(M(n(x)))
  postnorm  x = x + n(A(x)); x = x + n(M(x))
  parallel  u = n(x); x = x + A(u) + M(u)
"""
import contextlib
import json
import math
import os
import sys
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file
from transformers import (Gemma2Config, Gemma2ForCausalLM, GemmaConfig, GemmaForCausalLM, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Olmo2Config, Olmo2ForCausalLM, PhiConfig, PhiForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
from transformers.models.gemma import modeling_gemma
from transformers.models.gemma2 import modeling_gemma2
from transformers.models.llama import modeling_llama
from transformers.models.mistral import modeling_mistral
from transformers.models.olmo2 import modeling_olmo2
from transformers.models.phi import modeling_phi
from transformers.models.phi3 import modeling_phi3
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_gpt2_fixture import (ADAMW, ADAMW_STEPS, doc_mask, draw_batch, draw_packed_batch, fixture_main,  # noqa: E402
                              write_safetensors)

FIXTURES = {
    "llama_gqa": dict(
        arch="llama",
        hf=dict(vocab_size=512, hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                intermediate_size=160, num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-5,
                rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                hidden_act="silu"),
        batch=3, seq_len=37, seed=2001),
    "qwen2_bias": dict(
        arch="qwen2",
        hf=dict(vocab_size=500, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=176, num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False, hidden_act="silu"),
        batch=2, seq_len=29, seed=2002),
    "qwen3_qknorm": dict(
        arch="qwen3",
        hf=dict(vocab_size=384, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                intermediate_size=96, num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                hidden_act="silu"),
        batch=2, seq_len=23, seed=2003),
    # hidden 144: sqrt(144) = 12, Gemma's embedding scale, is exact in every precision.
    "gemma_geglu": dict(
        arch="gemma",
        hf=dict(vocab_size=320, hidden_size=144, num_attention_heads=2, num_key_value_heads=1, head_dim=48,
                intermediate_size=80, num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                rope_theta=10000.0, tie_word_embeddings=True, attention_bias=False,
                hidden_act="gelu_pytorch_tanh"),
        batch=2, seq_len=31, seed=2004),
    # hidden 64 (scale 8); a logit cap of 0.75 bends the logits (the largest, 0.65, to
    # 0.53; typical ones, 0.16, by 1.5%); the sliding window (every other layer) covers
    # max_position_embeddings, so sliding layers are plainly causal.
    "gemma2_sandwich": dict(
        arch="gemma2",
        hf=dict(vocab_size=416, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                intermediate_size=96, num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                rope_theta=10000.0, tie_word_embeddings=True, attention_bias=False,
                hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=32, attn_logit_softcapping=0.03,
                final_logit_softcapping=0.75, sliding_window=64),
        batch=2, seq_len=27, seed=2005),
    # head 32, partial_rotary_factor 0.5: the first 16 dims of each head rotate.
    "phi3_partial": dict(
        arch="phi3",
        hf=dict(vocab_size=352, hidden_size=96, num_attention_heads=3, num_key_value_heads=1,
                intermediate_size=128, num_hidden_layers=2, max_position_embeddings=64,
                original_max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                partial_rotary_factor=0.5, tie_word_embeddings=False, hidden_act="silu", resid_pdrop=0.0,
                embd_pdrop=0.0, sliding_window=None, bos_token_id=None, eos_token_id=None),
        batch=3, seq_len=25, seed=2006),
    # head 16 (hidden/heads: OLMo 2 has no head_dim key), 6 query heads on 2 key/value
    # heads; q normalised over its 96 values and k over its 32; rope_theta 500000 as
    # OLMo 2 ships it.
    "olmo2_postnorm": dict(
        arch="olmo2",
        hf=dict(vocab_size=416, hidden_size=96, num_attention_heads=6, num_key_value_heads=2,
                intermediate_size=144, num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                rope_theta=500000.0, tie_word_embeddings=False, attention_bias=False, hidden_act="silu",
                bos_token_id=None, eos_token_id=None),
        batch=2, seq_len=33, seed=2007),
    # head 32 (hidden/heads: Phi-2 has no head_dim key), partial_rotary_factor 0.4 as Phi-2
    # ships it: int(32 * 0.4) = 12 dims of each head rotate; GELU's tanh approximation.
    "phi2_parallel": dict(
        arch="phi",
        hf=dict(vocab_size=288, hidden_size=96, num_attention_heads=3, num_key_value_heads=3,
                intermediate_size=160, num_hidden_layers=2, max_position_embeddings=64, layer_norm_eps=1e-5,
                rope_theta=10000.0, partial_rotary_factor=0.4, tie_word_embeddings=False, hidden_act="gelu_new",
                qk_layernorm=False, resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=None, eos_token_id=None),
        batch=3, seq_len=21, seed=2008),
}
# Packed rows of (length, prompt) documents (draw_packed_batch) on the models above:
# llama_gqa's; gemma2_sandwich's with a window of 6 on the sliding layers (layer 0; layer
# 1 is full) that cuts documents of up to 15 tokens; and llama_gqa's sizes as Mistral, a
# window of 7 on every layer, row 0 one document, row 1 three.
FIXTURES["llama_packed"] = dict(
    FIXTURES["llama_gqa"], batch=3, seq_len=36, seed=2009,
    rows=[dict(docs=[(12, 3), (1, 0), (15, 2)], pad=8),
          dict(docs=[(6, 0), (20, 3), (10, 0)], cut=True),
          dict(docs=[(1, 0), (9, 2), (17, 0), (5, 2)], pad=4)])
FIXTURES["gemma2_packed"] = dict(
    FIXTURES["gemma2_sandwich"], hf=dict(FIXTURES["gemma2_sandwich"]["hf"], sliding_window=6),
    batch=2, seq_len=32, seed=2010,
    rows=[dict(docs=[(14, 3), (1, 0), (11, 2)], pad=6),
          dict(docs=[(4, 0), (15, 2), (13, 0)], cut=True)])
FIXTURES["mistral_window"] = dict(
    arch="mistral",
    hf=dict({k: v for k, v in FIXTURES["llama_gqa"]["hf"].items() if k not in ("attention_bias", "mlp_bias")},
            sliding_window=7),
    batch=2, seq_len=30, seed=2011,
    rows=[dict(docs=[(30, 0)], cut=True),
          dict(docs=[(13, 2), (1, 0), (12, 3)], pad=4)])
ARCH = {"llama": (LlamaConfig, LlamaForCausalLM, modeling_llama, "Llama"),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM, modeling_qwen2, "Qwen2"),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM, modeling_qwen3, "Qwen3"),
        "gemma": (GemmaConfig, GemmaForCausalLM, modeling_gemma, "Gemma"),
        "gemma2": (Gemma2Config, Gemma2ForCausalLM, modeling_gemma2, "Gemma2"),
        "phi3": (Phi3Config, Phi3ForCausalLM, modeling_phi3, "Phi3"),
        "olmo2": (Olmo2Config, Olmo2ForCausalLM, modeling_olmo2, "Olmo2"),
        "phi": (PhiConfig, PhiForCausalLM, modeling_phi, "Phi"),
        "mistral": (MistralConfig, MistralForCausalLM, modeling_mistral, "Mistral")}
GEMMA = ("gemma", "gemma2")  # RMSNorm x * rstd * (1 + w), GeGLU, embeddings times sqrt(hidden)
PARTIAL = ("phi3", "phi")  # partial_rotary_factor: the first int(hs * factor) dims of a head rotate


# ------------------------------------------------------------------ the transformers model

def make_config(spec):
    config_cls = ARCH[spec["arch"]][0]
    cfg = config_cls(**spec["hf"], attention_dropout=0.0, use_cache=False, pad_token_id=None,
                     attn_implementation="eager")
    hf = spec["hf"]
    # Plain RoPE with the requested base, no scaling; no dropout anywhere; eager attention.
    rope = getattr(cfg, "rope_parameters", None)
    if rope is not None:  # transformers >= 5
        want = {"rope_type": "default", "rope_theta": hf["rope_theta"]}
        if "partial_rotary_factor" in hf:  # Phi-3 and Phi-2 keep the rotated fraction of a head here
            want["partial_rotary_factor"] = hf["partial_rotary_factor"]
        assert rope == want, rope
    else:
        assert cfg.rope_theta == hf["rope_theta"] and getattr(cfg, "rope_scaling", None) is None
    assert cfg.attention_dropout == 0.0 and cfg._attn_implementation == "eager"
    assert all(v == 0 for k, v in vars(cfg).items() if "dropout" in k or "pdrop" in k), "a dropout is set"
    assert cfg.tie_word_embeddings == hf["tie_word_embeddings"]
    if spec["arch"] in ("qwen2", "qwen3"):
        assert cfg.sliding_window is None and set(cfg.layer_types) == {"full_attention"}
    if spec["arch"] in GEMMA:
        act = cfg.hidden_activation if spec["arch"] == "gemma2" else cfg.hidden_act
        assert act == "gelu_pytorch_tanh" and not cfg.attention_bias and not cfg.use_bidirectional_attention
    if spec["arch"] == "gemma2":
        # handgrad scales scores by 1/sqrt(head_dim) only, and a window at least as long as
        # any sequence here leaves sliding layers causal.
        assert cfg.attn_logit_softcapping == hf["attn_logit_softcapping"] and cfg.query_pre_attn_scalar == cfg.head_dim
        assert cfg.final_logit_softcapping == hf["final_logit_softcapping"] > 0
        if "sliding_window" not in handgrad_config(spec):
            assert cfg.sliding_window >= cfg.max_position_embeddings >= spec["seq_len"]
        assert set(cfg.layer_types) <= {"full_attention", "sliding_attention"}
    if spec["arch"] == "mistral":  # no layer_types: the window is on every layer
        assert cfg.hidden_act == "silu" and cfg.sliding_window == hf["sliding_window"]
        assert getattr(cfg, "layer_types", None) is None
    hg = handgrad_config(spec)
    if "sliding_window" in hg:  # handgrad's rule picks transformers' sliding layers
        assert cfg.sliding_window == hg["sliding_window"]
        assert [layer_window(hg, l) > 0 for l in range(cfg.num_hidden_layers)] == hf_sliding_layers(cfg)
    if spec["arch"] == "phi3":
        assert cfg.sliding_window is None and cfg.hidden_act == "silu" and not hasattr(cfg, "head_dim")
    if spec["arch"] == "olmo2":  # whole-width q/k norms, no biases, head_dim = hidden / heads
        assert cfg.hidden_act == "silu" and not cfg.attention_bias and not hasattr(cfg, "head_dim")
        assert cfg.num_key_value_heads < cfg.num_attention_heads
    if spec["arch"] == "phi":  # handgrad's q/k norm is no LayerNorm of each head: none here
        assert cfg.hidden_act == "gelu_new" and not cfg.qk_layernorm and not hasattr(cfg, "head_dim")
    return cfg


def hf_sliding_layers(cfg):
    """Which layers transformers gives the sliding-window mask: layer_types' sliding_attention
    ones (Gemma 2), every layer for Mistral's one sliding mask."""
    if getattr(cfg, "layer_types", None) is not None:
        return [t == "sliding_attention" for t in cfg.layer_types]
    return [getattr(cfg, "sliding_window", None) is not None] * cfg.num_hidden_layers


def make_model(spec, dtype):
    torch.manual_seed(0)  # transformers' own init is overwritten by load_params
    model = ARCH[spec["arch"]][1](make_config(spec)).to(dtype)
    model.eval()  # dropout is 0 anyway
    assert model.model.embed_tokens.padding_idx is None
    tied = spec["hf"]["tie_word_embeddings"]
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied, "lm_head tying is wrong"
    return model


@contextlib.contextmanager
def exact_float64(arch):
    """transformers' RMSNorm, rotary embedding and eager attention with their float32 casts
    removed (for a float32 model these are the same computation)."""
    _, _, mod, prefix = ARCH[arch]

    def rmsnorm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def gemma_rmsnorm(self, x):  # Gemma's: (x.float() normalized) * (1 + w.float())
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)) * (1.0 + self.weight)

    @torch.no_grad()
    def rotary(self, x, position_ids):
        assert self.rope_type == "default" and self.attention_scaling == 1.0
        cfg = self.config
        rope = getattr(cfg, "rope_parameters", None)
        theta = rope["rope_theta"] if rope else cfg.rope_theta
        hs = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        if rope and "partial_rotary_factor" in rope:  # Phi-3, Phi-2: the first hs * factor dims rotate
            hs = int(hs * rope["partial_rotary_factor"])
        inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
        assert inv_freq.shape == self.inv_freq.shape
        assert torch.allclose(inv_freq, self.inv_freq.double(), rtol=1e-6, atol=0)
        freqs = position_ids[..., None].double() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, softcap=None, **kwargs):
        key_states = mod.repeat_kv(key, module.num_key_value_groups)
        value_states = mod.repeat_kv(value, module.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if softcap is not None:  # Gemma 2's attn_logit_softcapping
            attn_weights = softcap * torch.tanh(attn_weights / softcap)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        return attn_output, attn_weights

    with contextlib.ExitStack() as stack:
        if arch != "phi":  # Phi-2's norms are nn.LayerNorm, without casts
            stack.enter_context(mock.patch.object(getattr(mod, prefix + "RMSNorm"), "forward",
                                                  gemma_rmsnorm if arch in GEMMA else rmsnorm))
        stack.enter_context(mock.patch.object(getattr(mod, prefix + "RotaryEmbedding"), "forward", rotary))
        stack.enter_context(mock.patch.object(mod, "eager_attention_forward", eager))
        yield


def loss_fn(logits, targets):
    """Mean cross-entropy over the targets != -1; targets are already aligned with tokens."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(), ignore_index=-1)


def explicit_mask(model, positions):
    """The additive (B, 1, T, T) masks, 0 or -inf, of packed documents (doc_mask), with the
    window on the sliding layers: a dict by layer type where the model has layer_types
    (Gemma 2), the one mask of all its layers otherwise."""
    cfg = model.config

    def additive(window):
        ok = doc_mask(positions, window)
        return torch.zeros(ok.shape, dtype=model.dtype).masked_fill(~ok, -math.inf)

    sliding = hf_sliding_layers(cfg)
    if getattr(cfg, "layer_types", None) is not None and any(sliding):
        return {"full_attention": additive(0), "sliding_attention": additive(cfg.sliding_window)}
    assert all(sliding) or not any(sliding)
    return additive(cfg.sliding_window if any(sliding) else 0)


def run(model, tokens, targets, positions=None, stock_mask=False):
    """(logits, loss). Given positions: position_ids = positions and explicit_mask, or
    (stock_mask) no attention_mask, so that transformers builds its own packed-sequence
    masks from position_ids."""
    if positions is None:
        logits = model(input_ids=tokens.long(), use_cache=False).logits
    else:
        mask = None if stock_mask else explicit_mask(model, positions)
        logits = model(input_ids=tokens.long(), position_ids=positions.long(), attention_mask=mask,
                       use_cache=False).logits
    return logits, loss_fn(logits, targets)


# ------------------------------------------------------------------ handgrad's layout

def handgrad_config(spec):
    h, arch = spec["hf"], spec["arch"]
    hs = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
    phi = arch == "phi"
    cfg = {
        "vocab_size": h["vocab_size"], "max_seq_len": h["max_position_embeddings"],
        "n_layer": h["num_hidden_layers"], "n_head": h["num_attention_heads"],
        "n_kv_head": h["num_key_value_heads"], "d_model": h["hidden_size"], "d_ff": h["intermediate_size"],
        "head_dim": hs, "dropout": 0.0,
        "norm": "layernorm" if phi else "rmsnorm", "norm_eps": h["layer_norm_eps" if phi else "rms_norm_eps"],
        "position": "rope", "rope_theta": h["rope_theta"],
        "mlp": "gelu" if phi else "geglu" if arch in GEMMA else "swiglu", "tied": h["tie_word_embeddings"],
        "qkv_bias": arch in ("qwen2", "phi"), "proj_bias": phi, "mlp_bias": phi, "qk_norm": arch in ("qwen3", "olmo2"),
    }
    if arch in GEMMA:  # Gemma's normalizer, sqrt(hidden) rounded to float32 as transformers holds it
        cfg["embed_scale"] = float(np.float32(math.sqrt(h["hidden_size"])))
    if arch == "gemma2":
        cfg["block"] = "sandwich"
        cfg["logit_softcap"] = h["final_logit_softcapping"]
        if h.get("attn_logit_softcapping"):
            cfg["attn_softcap"] = h["attn_logit_softcapping"]
    W = h.get("sliding_window")
    if W is not None and W < spec["seq_len"]:  # a window that cuts (a longer one changes nothing)
        cfg["sliding_window"] = W
        cfg["window_period"] = 2 if arch == "gemma2" else 0  # Gemma 2: layers 0, 2, ...; Mistral: all
        cfg["window_first_layer"] = 0
    if arch == "olmo2":  # post norms only; q and k normalised over all their heads at once
        cfg["block"] = "postnorm"
        cfg["qk_norm_whole"] = True
    if phi:  # one LayerNorm (with a bias) feeding attention and MLP; a biased output layer
        cfg["block"] = "parallel"
        cfg["norm_bias"] = True
        cfg["lm_head_bias"] = True
    if arch in PARTIAL:  # transformers truncates head_dim * partial_rotary_factor
        cfg["rotary_dim"] = int(hs * h["partial_rotary_factor"])
        assert cfg["rotary_dim"] % 2 == 0 and 0 < cfg["rotary_dim"] < hs
    return cfg


def handgrad_shapes(spec):
    """handgrad name -> shape, in handgrad's order: the parameter table of
    src/model/gpt.c (build_param_table) for this config."""
    cfg = handgrad_config(spec)
    C, NH, NKV, F_, V = cfg["d_model"], cfg["n_head"], cfg["n_kv_head"], cfg["d_ff"], cfg["vocab_size"]
    hs, block = cfg["head_dim"], cfg.get("block", "prenorm")
    QD, KVD = NH * hs, NKV * hs
    FI = F_ if cfg["mlp"] == "gelu" else 2 * F_  # gate | up for the gated MLPs
    n1, n2 = block != "postnorm", block in ("prenorm", "sandwich")  # ln_1, ln_2
    post = block in ("postnorm", "sandwich")  # the norms of each sublayer's output
    nb = cfg["norm"] == "layernorm" and cfg.get("norm_bias", True)
    whole = cfg.get("qk_norm_whole", False)
    shapes = {"wte.weight": (V, C)}

    def add(name, shape, on=True):
        if on:
            shapes[name] = shape

    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        add(p + "ln_1.weight", (C,), n1)
        add(p + "ln_1.bias", (C,), n1 and nb)
        add(p + "attn.c_attn.weight", (C, QD + 2 * KVD))
        add(p + "attn.c_attn.bias", (QD + 2 * KVD,), cfg["qkv_bias"])
        add(p + "attn.q_norm.weight", (QD if whole else hs,), cfg["qk_norm"])
        add(p + "attn.k_norm.weight", (KVD if whole else hs,), cfg["qk_norm"])
        add(p + "attn.c_proj.weight", (QD, C))
        add(p + "attn.c_proj.bias", (C,), cfg["proj_bias"])
        add(p + "attn.post_norm.weight", (C,), post)
        add(p + "attn.post_norm.bias", (C,), post and nb)
        add(p + "ln_2.weight", (C,), n2)
        add(p + "ln_2.bias", (C,), n2 and nb)
        add(p + "mlp.c_fc.weight", (C, FI))
        add(p + "mlp.c_fc.bias", (FI,), cfg["mlp_bias"])
        add(p + "mlp.c_proj.weight", (F_, C))
        add(p + "mlp.c_proj.bias", (C,), cfg["mlp_bias"])
        add(p + "mlp.post_norm.weight", (C,), post)
        add(p + "mlp.post_norm.bias", (C,), post and nb)
    add("ln_f.weight", (C,))
    add("ln_f.bias", (C,), nb)
    add("lm_head.weight", (V, C), not cfg["tied"])
    add("lm_head.bias", (V,), cfg.get("lm_head_bias", False))
    return shapes


NORMS = ("ln_1", "ln_2", "ln_f", "attn.post_norm", "mlp.post_norm", "attn.q_norm", "attn.k_norm")


def recipe(spec, name):
    """The transformers tensors that handgrad parameter `name` is made of, as
    (parts, transposed, norm): parts [(transformers name, rows)], stacked along their
    first axis (q | k | v, gate | up); transposed: nn.Linear weights (out, in), so
    handgrad's tensor is that stack transposed; norm: a norm weight (Gemma's offset)."""
    arch, h = spec["arch"], spec["hf"]
    hs = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
    QD, KVD, F_ = h["num_attention_heads"] * hs, h["num_key_value_heads"] * hs, h["intermediate_size"]
    phi, phi3 = arch == "phi", arch == "phi3"
    module, kind = name.rsplit(".", 1)
    layer = module.startswith("h.")
    if layer:
        _, l, module = module.split(".", 2)
        t = f"model.layers.{l}."
    norm = module in NORMS
    linear = not norm and kind == "weight" and layer

    def one(hf_name):
        return [(hf_name + "." + kind, None)], linear, norm and kind == "weight"

    if not layer:
        return one({"wte": "model.embed_tokens", "lm_head": "lm_head",
                    "ln_f": "model.final_layernorm" if phi else "model.norm"}[module])
    if module == "attn.c_attn":
        if phi3:
            return one(t + "self_attn.qkv_proj")
        return [(t + f"self_attn.{n}_proj.{kind}", r) for n, r in zip("qkv", (QD, KVD, KVD))], linear, False
    if module == "mlp.c_fc" and not phi:
        if phi3:
            return one(t + "mlp.gate_up_proj")
        return [(t + f"mlp.{n}_proj.{kind}", F_) for n in ("gate", "up")], linear, False
    return one(t + {
        "attn.c_proj": "self_attn.dense" if phi else "self_attn.o_proj",
        "mlp.c_fc": "mlp.fc1",  # Phi-2's
        "mlp.c_proj": "mlp.fc2" if phi else "mlp.down_proj",
        "ln_1": "input_layernorm",
        "ln_2": "pre_feedforward_layernorm" if arch == "gemma2" else "post_attention_layernorm",
        "attn.post_norm": "post_attention_layernorm",  # Gemma 2, OLMo 2: on the attention's output
        "mlp.post_norm": "post_feedforward_layernorm",
        "attn.q_norm": "self_attn.q_norm",
        "attn.k_norm": "self_attn.k_norm",
    }[module])


def norm_shift(spec, sign):
    """handgrad's norm weight = transformers' + 1 where the RMSNorm multiplies by (1 + w)
    (Gemma): a function adding sign * 1 there, the identity elsewhere (sign 0: gradients)."""
    if spec["arch"] not in GEMMA or sign == 0:
        return lambda v: v
    return lambda v: v + sign


def to_torch(spec, hg):
    """handgrad name -> tensor  to  transformers parameter name -> tensor (contiguous).
    Values only (Gemma's norm weights are shifted by 1)."""
    shift, out = norm_shift(spec, -1.0), {}
    for name, v in hg.items():
        parts, transposed, norm = recipe(spec, name)
        v = shift(v) if norm else v
        v = v.T if transposed else v
        pieces = v.split([r for _, r in parts], dim=0) if len(parts) > 1 else [v]
        assert sum(p.shape[0] for p in pieces) == v.shape[0]
        for (theirs, _), piece in zip(parts, pieces):
            assert theirs not in out, theirs
            out[theirs] = piece
    return {k: v.contiguous() for k, v in out.items()}


def to_handgrad(spec, tt, grad=False):
    """transformers parameter name -> tensor  to  handgrad name -> tensor (contiguous), in
    handgrad's order. grad: the tensors are gradients, which Gemma's norm offset does not
    change."""
    shift, out = norm_shift(spec, 0.0 if grad else 1.0), {}
    for name in handgrad_shapes(spec):
        parts, transposed, norm = recipe(spec, name)
        v = torch.cat([tt[theirs] for theirs, _ in parts], dim=0)
        v = v.T if transposed else v
        out[name] = shift(v) if norm else v
    return {k: v.contiguous() for k, v in out.items()}


def load_params(spec, model, hg):
    """Copies handgrad-layout tensors into the model; every parameter must be covered once."""
    tt = to_torch(spec, hg)
    named = dict(model.named_parameters())  # a tied lm_head is listed once, as embed_tokens
    assert named.keys() == tt.keys(), f"unmapped: {sorted(named.keys() ^ tt.keys())}"
    with torch.no_grad():
        for k, p in named.items():
            assert p.shape == tt[k].shape, (k, p.shape, tt[k].shape)
            p.copy_(tt[k].to(p.dtype))


def build(spec, hg, dtype):
    model = make_model(spec, dtype)
    load_params(spec, model, hg)
    return model


def layer_window(cfg, l):
    """handgrad's window of layer l (hg_layer_window): sliding_window, or 0 for full attention."""
    W, P = cfg.get("sliding_window", 0), cfg.get("window_period", 0)
    if W <= 0 or l < cfg.get("window_first_layer", 0) or (P > 1 and l % P == P - 1):
        return 0
    return W


def handgrad_masks(cfg, positions):
    """Per layer, (B, 1, T, T) bool: query i sees key j when i - positions[i] <= j <= i
    (its document's start to itself) and, in a layer with window W, j > i - W."""
    T = positions.shape[1]
    i, j = torch.arange(T)[None, :, None], torch.arange(T)[None, None, :]
    ok = (j >= i - positions.long()[:, :, None]) & (j <= i)
    return [(ok & (j > i - W) if (W := layer_window(cfg, l)) else ok)[:, None] for l in range(cfg["n_layer"])]


def handgrad_forward(spec, hg, tokens, positions=None, attn_cap=True, window=True):
    """An independent float64 forward over the handgrad-layout tensors, written from the
    layout table and driven by handgrad's config (the fixture's metadata), not from
    transformers, used only to check the mapping both ways (positions: packed documents,
    default 0..T-1; attn_cap / window False: without the attention scores' cap or the
    sliding window, to show that they matter)."""
    cfg = handgrad_config(spec)
    if not attn_cap:
        cfg.pop("attn_softcap", None)
    if not window:
        cfg.pop("sliding_window", None)
    NH, NKV, hs, F_ = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"], cfg["d_ff"]
    eps, theta = cfg["norm_eps"], cfg["rope_theta"]
    rot = cfg.get("rotary_dim") or hs  # the first rot dims of a head rotate, the rest pass
    cap, block = cfg.get("logit_softcap", 0), cfg.get("block", "prenorm")
    QD, KVD = NH * hs, NKV * hs
    B, T = tokens.shape

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def norm(x, name):  # a block's or the final norm, by handgrad name
        w, b = hg[name + ".weight"], hg.get(name + ".bias")
        if cfg["norm"] == "rmsnorm":
            assert b is None
            return rms(x, w)
        mu = x.mean(-1, keepdim=True)
        y = (x - mu) * torch.rsqrt((x - mu).pow(2).mean(-1, keepdim=True) + eps) * w
        return y if b is None else y + b

    def linear(x, name):
        y = x @ hg[name + ".weight"]
        return y + hg[name + ".bias"] if name + ".bias" in hg else y

    if positions is None:
        positions = torch.arange(T, dtype=torch.int32).expand(B, T)
    ang = positions.double()[..., None] / theta ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot)
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]  # (B, 1, T, rot/2), at each token's position

    def rope(x):  # (B, heads, T, hs), pairs (i, i + rot/2) for i < rot/2
        x1, x2, rest = x[..., : rot // 2], x[..., rot // 2: rot], x[..., rot:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)

    def gelu_tanh(g):
        return 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g.pow(3))))

    masks = handgrad_masks(cfg, positions)
    kv_of = torch.arange(NH) // (NH // NKV)  # query head h uses key/value head h // (NH/NKV)

    def attention(u, p, mask):
        qkv = linear(u, p + "attn.c_attn")
        q, k, v = qkv[..., :QD], qkv[..., QD:QD + KVD], qkv[..., QD + KVD:]
        if cfg["qk_norm"] and cfg.get("qk_norm_whole"):  # over all heads at once
            q, k = rms(q, hg[p + "attn.q_norm.weight"]), rms(k, hg[p + "attn.k_norm.weight"])
        q = q.reshape(B, T, NH, hs).transpose(1, 2)
        k = k.reshape(B, T, NKV, hs).transpose(1, 2)
        v = v.reshape(B, T, NKV, hs).transpose(1, 2)
        if cfg["qk_norm"] and not cfg.get("qk_norm_whole"):  # per head
            q, k = rms(q, hg[p + "attn.q_norm.weight"]), rms(k, hg[p + "attn.k_norm.weight"])
        q, k = rope(q), rope(k)  # after the q/k norm
        s = (q @ k[:, kv_of].transpose(-1, -2)) / math.sqrt(hs)
        if cfg.get("attn_softcap"):
            s = cfg["attn_softcap"] * torch.tanh(s / cfg["attn_softcap"])
        y = s.masked_fill(~mask, -math.inf).softmax(-1) @ v[:, kv_of]
        return linear(y.transpose(1, 2).reshape(B, T, QD), p + "attn.c_proj")

    def mlp(u, p):
        h = linear(u, p + "mlp.c_fc")
        if cfg["mlp"] == "gelu":
            a = gelu_tanh(h)
        elif cfg["mlp"] == "geglu":  # GELU's tanh approximation
            a = gelu_tanh(h[..., :F_]) * h[..., F_:]
        else:
            assert cfg["mlp"] == "swiglu"
            a = F.silu(h[..., :F_]) * h[..., F_:]
        return linear(a, p + "mlp.c_proj")

    x = hg["wte.weight"][tokens.long()]
    if cfg.get("embed_scale"):
        x = x * cfg["embed_scale"]
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        if block == "prenorm":
            x = x + attention(norm(x, p + "ln_1"), p, masks[l])
            x = x + mlp(norm(x, p + "ln_2"), p)
        elif block == "sandwich":
            x = x + norm(attention(norm(x, p + "ln_1"), p, masks[l]), p + "attn.post_norm")
            x = x + norm(mlp(norm(x, p + "ln_2"), p), p + "mlp.post_norm")
        elif block == "postnorm":
            x = x + norm(attention(x, p, masks[l]), p + "attn.post_norm")
            x = x + norm(mlp(x, p), p + "mlp.post_norm")
        else:
            assert block == "parallel"
            u = norm(x, p + "ln_1")
            x = x + attention(u, p, masks[l]) + mlp(u, p)
    logits = norm(x, "ln_f") @ hg.get("lm_head.weight", hg["wte.weight"]).T
    if cfg.get("lm_head_bias"):
        logits = logits + hg["lm_head.bias"]
    return cap * torch.tanh(logits / cap) if cap else logits


# ------------------------------------------------------------------ fixture generation

def draw_params(spec, rng):
    """Non-trivial float32 values in handgrad's layout: N(0, 0.02) weights and biases,
    1 + N(0, 0.1) norm weights."""
    params = {}
    for name, shape in handgrad_shapes(spec).items():
        z = rng.standard_normal(shape, dtype=np.float32)
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "q_norm.weight", "k_norm.weight",
                          "post_norm.weight")):
            v = np.float32(1) + np.float32(0.1) * z
        else:
            v = np.float32(0.02) * z
        params[name] = torch.from_numpy(v)
    return params


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


def adamw_trajectory(spec, params, tokens, targets, grad_clip, positions=None):
    """Losses before each update, pre-clip grad norms, and the final float64 parameters."""
    model = build(spec, params, torch.float64)
    ps = list(model.parameters())
    groups = [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": ADAMW["weight_decay"]},
              {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
                            foreach=False)
    losses, norms = [], []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = run(model, tokens, targets, positions)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip).item())
        losses.append(loss.item())
        opt.step()
    final = to_handgrad(spec, {n: p.detach().clone() for n, p in model.named_parameters()})
    return np.array(losses), np.array(norms), final


def clip_candidates(norms):
    """Values with 4 significant bits (exact in float32, short in decimal) near the median
    unclipped norm, nearest first."""
    m = float(np.median(norms))
    quantum = 2.0 ** (math.floor(math.log2(m)) - 3)
    ks = range(max(1, round(m / quantum) - 4), round(m / quantum) + 5)
    return sorted((k * quantum for k in ks), key=lambda c: (abs(c - m), c))


def clip_ok(norms, grad_clip):
    """Clipping acts on some steps, not all, and (so that a float32 engine takes the same
    decisions) no pre-clip norm is within 0.1% of the clip."""
    clipped = int((norms > grad_clip).sum())
    return 0 < clipped < ADAMW_STEPS and float(np.min(np.abs(norms / grad_clip - 1))) > 1e-3


def generate(name, spec, out_dir):
    B, T, V = spec["batch"], spec["seq_len"], spec["hf"]["vocab_size"]
    rng = np.random.default_rng(spec["seed"])
    params = draw_params(spec, rng)
    positions = None
    if "rows" in spec:
        tokens, targets, positions = draw_packed_batch(V, B, T, spec["rows"], rng)
    else:
        tokens, targets = draw_batch(V, B, T, rng)
    shapes = handgrad_shapes(spec)

    # Every transformers parameter is mapped, once; the mapping round-trips exactly.
    model = make_model(spec, torch.float64)
    n_model = sum(p.numel() for p in model.parameters())
    n_handgrad = sum(math.prod(s) for s in shapes.values())
    assert n_model == n_handgrad, f"{name}: model has {n_model} parameters, handgrad layout {n_handgrad}"
    back = to_handgrad(spec, to_torch(spec, params))
    assert back.keys() == params.keys() and all(torch.equal(back[k], params[k]) for k in params)

    with exact_float64(spec["arch"]):
        model = build(spec, params, torch.float64)
        logits, loss = run(model, tokens, targets, positions)
        loss.backward()
        grads = to_handgrad(spec, {n: p.grad.detach().clone() for n, p in model.named_parameters()}, grad=True)
        logits = logits.detach()
    assert math.isfinite(loss.item()), f"{name}: loss is not finite"
    cap = handgrad_config(spec).get("logit_softcap")
    if cap:  # the cap must bend the logits: the uncapped values are cap * atanh(logits / cap)
        raw = cap * torch.atanh(logits / cap)
        print(f"{name}: logit_softcap {cap}: max |logit| {raw.abs().max().item():.4f} before the cap, "
              f"{logits.abs().max().item():.4f} after; rms {raw.pow(2).mean().sqrt().item():.4f} before")
        assert (raw - logits).abs().max() > 0.05 * raw.abs().max(), f"{name}: the logit cap hardly bends the logits"
    assert {k: tuple(v.shape) for k, v in grads.items()} == shapes

    # Independent check of the layout: a forward written from the table, on handgrad tensors.
    hg64 = {k: v.double().requires_grad_() for k, v in params.items()}
    ref_logits = handgrad_forward(spec, hg64, tokens, positions)
    if positions is not None:  # the documents, and the window, must matter
        with torch.no_grad():
            moved = {"one causal sequence per row": handgrad_forward(spec, hg64, tokens)}
            if "sliding_window" in handgrad_config(spec):
                moved["no window"] = handgrad_forward(spec, hg64, tokens, positions, window=False)
        for what, lg in moved.items():
            rel = ((lg - ref_logits).abs().max() / ref_logits.abs().max()).item()
            print(f"{name}: with {what}, logits move by max rel {rel:.1e}")
            assert rel > 1e-3, f"{name}: {what} hardly changes the logits"
    if handgrad_config(spec).get("attn_softcap"):  # the score cap must matter
        with torch.no_grad():
            bent = (handgrad_forward(spec, hg64, tokens, positions, attn_cap=False) - ref_logits).abs().max().item()
        print(f"{name}: attn_softcap {handgrad_config(spec)['attn_softcap']}: logits move by {bent:.3e} without it")
        assert bent > 1e-3 * ref_logits.abs().max().item(), f"{name}: the attention cap hardly matters"
    loss_fn(ref_logits, targets).backward()
    ind_logits = ((ref_logits.detach() - logits).abs().max() / logits.abs().max()).item()
    ind_grad = max(rel_err(hg64[k].grad, grads[k]) for k in grads)
    print(f"{name}: independent handgrad-layout forward: logits max rel {ind_logits:.1e}, "
          f"worst grad rel-norm err {ind_grad:.1e}")
    assert ind_logits < 1e-12 and ind_grad < 1e-10, f"{name}: handgrad-layout forward disagrees"

    # Stock transformers (float32 casts inside) in float64, and fully in float32, agree;
    # given positions, with the masks transformers builds itself from position_ids, which
    # are, layer by layer, handgrad's.
    mod = ARCH[spec["arch"]][2]
    for dtype in (torch.float64, torch.float32):
        m = build(spec, params, dtype)
        seen, eager = {}, mod.eager_attention_forward

        def spy(module, query, key, value, attention_mask, *args, **kwargs):
            seen[module.layer_idx] = attention_mask
            return eager(module, query, key, value, attention_mask, *args, **kwargs)

        with mock.patch.object(mod, "eager_attention_forward", spy):
            lg, ls = run(m, tokens, targets, positions, stock_mask=True)
        if positions is not None:
            want = handgrad_masks(handgrad_config(spec), positions)
            assert sorted(seen) == list(range(len(want)))
            assert all(torch.equal(seen[l] == 0, want[l]) for l in seen), f"{name}: transformers' masks differ"
        ls.backward()
        g = to_handgrad(spec, {n: p.grad for n, p in m.named_parameters()}, grad=True)
        rel_loss = abs(ls.item() - loss.item()) / abs(loss.item())
        rel_logits = ((lg.detach().double() - logits).abs().max() / logits.abs().max()).item()
        rel_grad = max(rel_err(g[k].double(), grads[k]) for k in grads)
        print(f"{name}: stock transformers {str(dtype)[6:]}: loss {ls.item():.12f} rel {rel_loss:.1e}; "
              f"logits max rel {rel_logits:.1e}; worst grad rel-norm err {rel_grad:.1e}")
        assert rel_loss < 1e-5 and rel_logits < 1e-5 and rel_grad < 1e-4, f"{name}: stock {dtype} disagrees"

    # Choose the clip from an unclipped run: the candidate nearest the median norm that
    # clips some steps, not all, with no norm near the threshold.
    with exact_float64(spec["arch"]):
        _, free_norms, _ = adamw_trajectory(spec, params, tokens, targets, math.inf, positions)
        for grad_clip in clip_candidates(free_norms):
            losses, norms, final = adamw_trajectory(spec, params, tokens, targets, grad_clip, positions)
            if clip_ok(norms, grad_clip):
                break
            print(f"{name}: grad_clip {grad_clip} rejected (pre-clip norms {np.array2string(norms, precision=5)})")
    clipped = [k for k in range(ADAMW_STEPS) if norms[k] > grad_clip]
    margin = float(np.min(np.abs(norms / grad_clip - 1)))
    print(f"{name}: loss {loss.item():.12f}; grad_clip {grad_clip}; pre-clip norms "
          f"{np.array2string(norms, precision=4)}; clipped steps {clipped}; closest norm {margin:.1%} from the clip")
    print(f"{name}: losses {np.array2string(losses, precision=8, max_line_width=200)}")
    assert 0 < len(clipped) < ADAMW_STEPS, f"{name}: clipping must be active on some steps, not all"
    # A float32 engine must take the same clip decisions, so no norm may sit on the threshold.
    assert margin > 1e-3, f"{name}: a grad norm is within {margin:.1e} of grad_clip"
    assert np.isfinite(losses).all() and np.isfinite(norms).all(), f"{name}: non-finite trajectory"
    assert losses[0] == loss.item(), f"{name}: first trajectory loss differs from the reference loss"
    assert (np.diff(losses) < 0).all(), f"{name}: loss does not decrease at every AdamW step"

    tensors = {"tokens": tokens, "targets": targets, "logits": logits,
               "loss": torch.tensor([loss.item()], dtype=torch.float64),
               "adamw.losses": torch.from_numpy(losses), "adamw.grad_norms": torch.from_numpy(norms)}
    if positions is not None:
        tensors["positions"] = positions
    for n in params:
        tensors[f"param.{n}"] = params[n]
        tensors[f"grad.{n}"] = grads[n]
        tensors[f"final.{n}"] = final[n]
    metadata = {
        "config": json.dumps(handgrad_config(spec)),
        "batch": str(B),
        "seq_len": str(T),
        "adamw": json.dumps({**ADAMW, "grad_clip": grad_clip}),
        "generator": "tools/gen_llama_fixture.py",
        "hf_class": ARCH[spec["arch"]][1].__name__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    }
    path = os.path.join(out_dir, f"{name}.safetensors")
    write_safetensors(path, tensors, metadata)

    # Read it back with the reference reader; a fresh model built from the file's params
    # (handgrad layout mapped back) reproduces the stored logits.
    back = load_file(path)
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)
    with exact_float64(spec["arch"]):
        fresh = build(spec, {k[6:]: v for k, v in back.items() if k.startswith("param.")}, torch.float64)
        with torch.no_grad():
            lg, _ = run(fresh, back["tokens"], back["targets"], back.get("positions"))
    err = ((lg - back["logits"]).abs().max() / back["logits"].abs().max()).item()
    assert err <= 1e-12, f"{name}: rebuilt model's logits differ by {err:.1e}"
    print(f"{name}: reloaded; rebuilt model's logits max rel diff {err:.1e}")
    print(f"{name}: wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB, {len(tensors)} tensors)")


def main():
    fixture_main(__doc__, FIXTURES, generate)


if __name__ == "__main__":
    main()
