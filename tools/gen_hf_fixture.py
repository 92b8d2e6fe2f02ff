#!/usr/bin/env python3
"""Writes the Hugging Face fixtures in tests/fixtures/ that the C tests load.

  hf_tiny/         a tiny random GPT2LMHeadModel as transformers' save_pretrained writes it
                   (config.json, model.safetensors with "transformer." names and no lm_head,
                   generation_config.json), plus the tokenizer files GPT2TokenizerFast
                   writes (vocab.json, merges.txt, ...) for a byte-level BPE trained with
                   the tokenizers library on the text below.
  hf_tiny_legacy/  the same weights in the older layout of the hub's gpt2 checkpoints: no
                   "transformer." prefix, the causal-mask buffers h.N.attn.bias, and an
                   explicit lm_head.weight equal to wte (config.json only, no tokenizer).
  hf_tiny_reference.safetensors
                   tokens I32 (T,)       the tokenizer's ids for PROMPT
                   logits F64 (T, V)     the model's logits, computed in float64
                   greedy I32 (N,)       transformers' greedy continuation (float64, KV cache)
                   __metadata__          prompt, greedy_text (the continuation decoded)
  hf_tiny_greedy.bin
                   the bytes of the greedy continuation (byte-level BPE tokens are bytes;
                   transformers' decode would replace invalid UTF-8), for the CLI test
  st_half.safetensors
                   f16, bf16 (64,)       half-precision values (normal, subnormal, zero, -0,
                   f16_f64, bf16_f64     +-inf, extremes) and their exact values as F64

The weights are GPT-2's init at a larger scale with random biases and LayerNorm
parameters, so that a wrongly mapped or transposed tensor changes the logits.
Usage: python3 tools/gen_hf_fixture.py [--out-dir tests/fixtures]
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from tokenizers import ByteLevelBPETokenizer
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

TEXT = """In the beginning God created the heaven and the earth. And the earth was without form,
and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the
face of the waters. And God said, Let there be light: and there was light. And God saw the
light, that it was good: and God divided the light from the darkness. And God called the
light Day, and the darkness he called Night. And the evening and the morning were the first
day. 0123456789 (numbers), "quotes"; caf\u00e9 na\u00efve \u2014 \u65e5\u672c\u8a9e.
"""
PROMPT = "And God said, Let there be light"
VOCAB = 320
GREEDY_TOKENS = 12
SEED = 2


def byte_alphabet():
    """GPT-2's byte alphabet: the printable Latin-1 bytes stand for themselves, the other 68
    bytes, in order, for U+0100 onwards. Returns character -> byte."""
    keep = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    out = {chr(b): b for b in keep}
    others = [b for b in range(256) if b not in out.values()]
    out.update({chr(0x100 + i): b for i, b in enumerate(others)})
    return out


def train_tokenizer(out):
    tok = ByteLevelBPETokenizer(add_prefix_space=False)
    tok.train_from_iterator([TEXT] * 4, vocab_size=VOCAB, min_frequency=1, special_tokens=["<|endoftext|>"],
                            show_progress=False)
    fast = GPT2TokenizerFast(tokenizer_object=tok._tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                             unk_token="<|endoftext|>")
    fast.save_pretrained(out)
    # GPT2TokenizerFast.save_pretrained writes tokenizer.json; the slow files are what
    # handgrad (and GPT2Tokenizer) read.
    tok.save_model(out)
    return GPT2TokenizerFast.from_pretrained(out)


def make_model(V, eot):
    cfg = GPT2Config(vocab_size=V, n_positions=64, n_embd=64, n_layer=2, n_head=4, initializer_range=0.08,
                     bos_token_id=eot, eos_token_id=eot)
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif ".ln_" in name or "ln_f" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    a = ap.parse_args()
    out = os.path.join(a.out_dir, "hf_tiny")
    legacy = os.path.join(a.out_dir, "hf_tiny_legacy")
    for d in (out, legacy):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    tok = train_tokenizer(out)
    V, eot = len(tok), tok.convert_tokens_to_ids("<|endoftext|>")
    assert V == VOCAB, V
    model = make_model(V, eot)
    model.save_pretrained(out)

    ids = tok(PROMPT)["input_ids"]
    x = torch.tensor([ids])
    m64 = make_model(V, eot).double()
    m64.load_state_dict(model.state_dict())
    with torch.no_grad():
        logits = m64(x).logits[0]
        l32 = model(x).logits[0].double()
        greedy = m64.generate(x, max_new_tokens=GREEDY_TOKENS, do_sample=False, use_cache=True,
                              pad_token_id=eot)[0, len(ids):]
    # the reference's own float32 run agrees with float64 to a few 1e-7 of the logits' scale
    print("float32 vs float64: max |diff| %.2e of max |logit| %.2f" % ((l32 - logits).abs().max(), logits.abs().max()))
    # greedy steps whose top two logits are close could flip in float32; require a margin
    with torch.no_grad():
        full = m64(torch.cat([x[0], greedy]).unsqueeze(0)).logits[0, len(ids) - 1:-1]
    top2 = full.topk(2, dim=-1).values
    print("greedy: smallest top-2 margin %.3f" % (top2[:, 0] - top2[:, 1]).min())
    assert (top2[:, 0] - top2[:, 1]).min() > 1e-3

    save_file({"tokens": torch.tensor(ids, dtype=torch.int32), "logits": logits.contiguous(),
               "greedy": greedy.to(torch.int32).contiguous()},
              os.path.join(a.out_dir, "hf_tiny_reference.safetensors"),
              metadata={"prompt": PROMPT, "greedy_text": tok.decode(greedy.tolist()),
                        "generator": "tools/gen_hf_fixture.py"})

    byte_of = byte_alphabet()
    raw = b"".join(bytes(byte_of[ch] for ch in tok.convert_ids_to_tokens(i)) for i in greedy.tolist())
    with open(os.path.join(a.out_dir, "hf_tiny_greedy.bin"), "wb") as f:
        f.write(raw)

    # half precision, for the reader's conversions
    g = torch.Generator().manual_seed(5)
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 65504.0, -65504.0, 6e-8, -6e-8, 1e-5, 1.0,
                            -2.0, 0.333])
    half = {}
    for name, dt in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        v = torch.cat([special, torch.randn(52, generator=g) * 100]).to(dt)
        half[name] = v
        half[name + "_f64"] = v.double()
    save_file(half, os.path.join(a.out_dir, "st_half.safetensors"))

    # the legacy layout: unprefixed names, mask buffers, an explicit lm_head
    sd = {k[len("transformer."):] if k.startswith("transformer.") else k: v.contiguous()
          for k, v in model.state_dict().items()}
    sd["lm_head.weight"] = sd["wte.weight"].clone()
    for i in range(model.config.n_layer):
        sd["h.%d.attn.bias" % i] = torch.tril(torch.ones(1, 1, 64, 64, dtype=torch.uint8))
    save_file(sd, os.path.join(legacy, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(out, "config.json"), legacy)
    print("wrote", out, legacy, "prompt ids", ids, "greedy", greedy.tolist())


if __name__ == "__main__":
    main()
