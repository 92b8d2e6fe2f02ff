#!/usr/bin/env python3
"""Writes the Hugging Face Llama-family folders in tests/fixtures/ that the C tests load.

Each folder is what transformers' save_pretrained writes for a tiny random model, plus a
tokenizer.json from tests/fixtures/tokenizers/ (made by tools/gen_tokjson_fixture.py)
whose vocabulary sets the model's vocab_size:

  hf_llama/    LlamaForCausalLM: grouped-query attention 4/2, untied, Llama 3.1's rope
               scaling (factor 8, original context 32), stored in bfloat16 and sharded
               into several files with model.safetensors.index.json; the Llama-3-style
               tokenizer (it prepends <|begin_of_text|>); generation_config.json lists
               two eos ids.
  hf_qwen2/    Qwen2ForCausalLM: q/k/v biases, tied, rope_theta 1e6, float32, one file;
               the Qwen2-style tokenizer (NFC, no BOS).
  hf_mistral/  MistralForCausalLM: sliding_window 80 below max_position_embeddings 128
               (handgrad caps the context at the window, where the two agree), untied,
               float16, one file; the sentencepiece-style tokenizer (byte fallback)
               when the tokenizers folder has one, else the Llama-3-style one.
  hf_gemma/    GemmaForCausalLM: GeGLU (gelu_pytorch_tanh), embeddings times sqrt(64) = 8,
               norm weights stored as offsets w (the norm multiplies by 1 + w),
               multi-query attention 4/1 with head_dim 32 (above hidden/heads), tied,
               stored in bfloat16, one file; the sentencepiece-style tokenizer.
  hf_gemma2/   Gemma2ForCausalLM: Gemma's plus the sandwich block (four norms a layer),
               final_logit_softcapping 2 (the largest logit, 1.7, is capped to 1.4),
               attn_logit_softcapping 2 (it bends scores of a few units),
               query_pre_attn_scalar = head_dim = 16,
               sliding_window 96 on every other layer (layer_types as transformers
               writes them; the prompt and its 32 tokens fit in the window), tied,
               float32, one file; the sentencepiece-style tokenizer.
  hf_phi3/     Phi3ForCausalLM: fused qkv_proj and gate_up_proj, partial_rotary_factor
               0.5 (8 of a head's 16 dims rotate), untied, float16, one file; the
               sentencepiece-style tokenizer.
  hf_olmo2/    Olmo2ForCausalLM: the postnorm block (post_attention_layernorm and
               post_feedforward_layernorm on the sublayers' outputs, no input norms),
               q_norm over all 64 query values and k_norm over all 32 key values,
               grouped-query attention 4/2, rope_theta 500000, untied, stored in bfloat16,
               one file; the sentencepiece-style tokenizer.
  hf_phi/      PhiForCausalLM (Phi-2): the parallel block (one LayerNorm, with a bias,
               feeding attention and a gelu_new MLP), biases on every linear and on
               lm_head, self_attn.dense, mlp.fc1/fc2 and model.final_layernorm,
               partial_rotary_factor 0.5 (8 of a head's 16 dims rotate), no head_dim key,
               untied, float32, one file; the sentencepiece-style tokenizer.

and beside each folder, hf_<name>_reference.safetensors:
  tokens   I32 (T,)   the tokenizer's ids for PROMPT (with BOS when it adds one)
  logits   F32 (T, V) transformers' logits for them, float32 weights as loaded from the
                      folder (bf16 and fp16 files are widened exactly), eager attention
  greedy   I32 (N,)   greedy continuation of N = 32 tokens: argmax of the full forward
                      at each step, eos ignored; every step's top-2 gap is checked to be
                      at least 1e-3 so fp32 rounding cannot flip it
  __metadata__        prompt, margin (the smallest top-2 gap)

Weights are drawn N(0, 0.2) (norm weights 1 + N(0, 0.1), biases N(0, 0.1), a
LayerNorm's bias too) so that the
logits spread out and the greedy path is well separated; Gemma's stored norm weights are
offsets from 1, drawn as (1 + N(0, 0.1)) - 1 in float32 (exact, and 1 + w is exact again)
so that the norms multiply by the same 1 + N(0, 0.1), and its embeddings, which enter
scaled by sqrt(hidden_size), N(0, 0.05).
Usage: python3 tools/gen_hf_llama_fixture.py [--out-dir tests/fixtures] [--only NAME]
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM, GemmaConfig, GemmaForCausalLM,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Olmo2Config,
                          Olmo2ForCausalLM, PhiConfig, PhiForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

PROMPT = "In the beginning God created the heaven and the earth."
GREEDY = 32
MIN_GAP = 1e-3

COMMON = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
              num_hidden_layers=2, max_position_embeddings=128, attention_dropout=0.0, hidden_act="silu")
GEMMA_COMMON = {k: v for k, v in COMMON.items() if k != "hidden_act"}
FOLDERS = {
    "hf_llama": dict(
        cls=(LlamaConfig, LlamaForCausalLM), tokenizer="llama3", dtype=torch.bfloat16, shard="100KB", seed=3001,
        hf=dict(COMMON, head_dim=16, rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False,
                mlp_bias=False, rope_theta=500000.0,
                rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=32)),
        eos=["<|end_of_text|>", "<|eot_id|>"], bos="<|begin_of_text|>"),
    "hf_qwen2": dict(
        cls=(Qwen2Config, Qwen2ForCausalLM), tokenizer="qwen2", dtype=torch.float32, shard=None, seed=3002,
        hf=dict(COMMON, rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1000000.0, use_sliding_window=False),
        eos=["<|endoftext|>"], bos=None),
    "hf_mistral": dict(
        cls=(MistralConfig, MistralForCausalLM), tokenizer=("sp", "llama3"), dtype=torch.float16,
        shard=None, seed=3003,
        hf=dict(COMMON, rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0, sliding_window=80),
        eos=["</s>", "<|end_of_text|>"], bos="<s>"),
    # Gemma's norm weights are offsets from 1 (norm_offsets); its activation is GELU's tanh
    # approximation, named hidden_act in Gemma's config and hidden_activation in Gemma 2's.
    # Its embeddings enter the residual stream times sqrt(64) = 8: drawn N(0, 0.2) they
    # swamp what the layers add, and with the tied output greedy decoding repeats the last
    # token (Gemma 2's post norms make it a single token for 32 steps), so they are drawn
    # N(0, 0.05) (and the seeds chosen for varied, well-separated greedy paths).
    "hf_gemma": dict(
        cls=(GemmaConfig, GemmaForCausalLM), tokenizer="sp", dtype=torch.bfloat16, shard=None, seed=3005,
        norm_offsets=True, embed_std=0.05,
        hf=dict(GEMMA_COMMON, num_key_value_heads=1, head_dim=32, hidden_act="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                tie_word_embeddings=True, attention_bias=False, rope_theta=10000.0),
        eos=["</s>"], bos="<s>"),
    "hf_gemma2": dict(
        cls=(Gemma2Config, Gemma2ForCausalLM), tokenizer="sp", dtype=torch.float32, shard=None, seed=3025,
        norm_offsets=True, embed_std=0.05,
        hf=dict(GEMMA_COMMON, head_dim=16, query_pre_attn_scalar=16, hidden_activation="gelu_pytorch_tanh",
                rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, rope_theta=10000.0,
                final_logit_softcapping=2.0, attn_logit_softcapping=2.0, sliding_window=96),
        eos=["</s>"], bos="<s>"),
    "hf_phi3": dict(
        cls=(Phi3Config, Phi3ForCausalLM), tokenizer="sp", dtype=torch.float16, shard=None, seed=3006,
        hf=dict(COMMON, rms_norm_eps=1e-5, tie_word_embeddings=False, rope_theta=10000.0, partial_rotary_factor=0.5,
                original_max_position_embeddings=128, resid_pdrop=0.0, embd_pdrop=0.0, sliding_window=None),
        eos=["</s>"], bos="<s>"),
    # OLMo 2 has no head_dim key: head 64 / 4 = 16.
    "hf_olmo2": dict(
        cls=(Olmo2Config, Olmo2ForCausalLM), tokenizer="sp", dtype=torch.bfloat16, shard=None, seed=3007,
        hf=dict(COMMON, rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=False, rope_theta=500000.0),
        eos=["</s>"], bos="<s>"),
    # Phi-2: no head_dim key (64 / 4 = 16), as many key/value heads as query heads, GELU's
    # tanh approximation, its LayerNorm's epsilon named layer_norm_eps.
    "hf_phi": dict(
        cls=(PhiConfig, PhiForCausalLM), tokenizer="sp", dtype=torch.float32, shard=None, seed=3008,
        hf=dict(COMMON, num_key_value_heads=4, hidden_act="gelu_new", layer_norm_eps=1e-5, tie_word_embeddings=False,
                rope_theta=10000.0, partial_rotary_factor=0.5, qk_layernorm=False, resid_pdrop=0.0, embd_pdrop=0.0),
        eos=["</s>"], bos="<s>"),
}


def tokenizer_path(tok_dir, which):
    for name in (which if isinstance(which, tuple) else (which,)):
        path = os.path.join(tok_dir, name, "tokenizer.json")
        if os.path.exists(path):
            return path
    raise SystemExit(f"no tokenizer {which} in {tok_dir}: run tools/gen_tokjson_fixture.py first")


def token_id(tok, text):
    return tok.token_to_id(text) if text else None


def fill(model, seed, norm_offsets=False, embed_std=0.2):
    """norm_offsets: the norm weights are stored as offsets from 1 (Gemma), drawn as
    (1 + N(0, 0.1)) - 1 in float32, exact, so that handgrad's fp32 1 + w and back gives
    the stored value bit for bit; embed_std: the token embeddings' deviation."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith(".weight"):  # a LayerNorm's bias is a bias
                w = 1 + 0.1 * torch.randn(p.shape, generator=g)
                p.copy_(w - 1 if norm_offsets else w)
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("embed_tokens.weight"):
                p.copy_(embed_std * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def greedy(model, ids):
    ids = list(ids)
    margin = float("inf")
    with torch.no_grad():
        for _ in range(GREEDY):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            top = torch.topk(logits, 2).values
            margin = min(margin, float(top[0] - top[1]))
            ids.append(int(logits.argmax()))
    return ids[-GREEDY:], margin


def make(name, spec, out_dir, tok_dir):
    tok_file = tokenizer_path(tok_dir, spec["tokenizer"])
    tok = Tokenizer.from_file(tok_file)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos = [i for i in (token_id(tok, t) for t in spec["eos"]) if i is not None]
    bos = token_id(tok, spec["bos"])
    config_cls, model_cls = spec["cls"]
    config = config_cls(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos[0] if len(eos) == 1 else eos,
                        pad_token_id=None, **spec["hf"])
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = model_cls(config).eval()
    fill(model, spec["seed"], spec.get("norm_offsets", False), spec.get("embed_std", 0.2))
    folder = os.path.join(out_dir, name)
    shutil.rmtree(folder, ignore_errors=True)
    model.to(spec["dtype"])
    # what the folder must load back as: the stored weights widened, in a fresh float32
    # model (its rotary frequencies and Gemma's embedding scale computed, not stored)
    widened = model_cls(config).eval()
    widened.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    kw = dict(max_shard_size=spec["shard"]) if spec["shard"] else {}
    model.save_pretrained(folder, **kw)
    shutil.copy(tok_file, os.path.join(folder, "tokenizer.json"))
    # the reference: the folder as transformers loads it, widened to float32
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    ids = tok.encode(PROMPT, add_special_tokens=True).ids
    with torch.no_grad():
        logits = ref(input_ids=torch.tensor([ids])).logits[0]
        direct = widened(input_ids=torch.tensor([ids])).logits[0]
    # the folder loads back as the model that wrote it (Gemma's embedding scale, a buffer
    # the files do not hold, included)
    assert torch.equal(logits, direct), f"{name}: the saved folder computes other logits"
    cont, margin = greedy(ref, ids)
    cap = getattr(ref.config, "final_logit_softcapping", None)
    if cap:  # Gemma 2: the cap must bend the logits (uncapped: cap * atanh(logits / cap))
        raw = cap * torch.atanh(logits.double() / cap)
        print(f"{name}: final_logit_softcapping {cap}: max |logit| {raw.abs().max().item():.3f} before the cap, "
              f"{logits.abs().max().item():.3f} after")
        assert (raw - logits).abs().max() > 0.05 * raw.abs().max(), f"{name}: the logit cap hardly bends the logits"
    assert margin >= MIN_GAP, f"{name}: greedy top-2 gap {margin:.2e}; change the seed"
    window = getattr(ref.config, "sliding_window", None) or ref.config.max_position_embeddings
    assert len(ids) + GREEDY <= min(window, ref.config.max_position_embeddings), "the prompt is too long"
    save_file({"tokens": torch.tensor(ids, dtype=torch.int32), "logits": logits.contiguous(),
               "greedy": torch.tensor(cont, dtype=torch.int32)},
              os.path.join(out_dir, f"{name}_reference.safetensors"),
              metadata={"prompt": PROMPT, "margin": f"{margin:.3e}"})
    files = sorted(os.listdir(folder))
    print(f"{name}: vocab {vocab}, {sum(p.numel() for p in model.parameters())} parameters, files {files}, "
          f"prompt {len(ids)} tokens, greedy margin {margin:.2e}, max |logit| {logits.abs().max().item():.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default="tests/fixtures")
    ap.add_argument("--tokenizers", default="tests/fixtures/tokenizers")
    ap.add_argument("--only", choices=sorted(FOLDERS))
    a = ap.parse_args()
    for name, spec in FOLDERS.items():
        if not a.only or a.only == name:
            make(name, spec, a.out_dir, a.tokenizers)


if __name__ == "__main__":
    main()
