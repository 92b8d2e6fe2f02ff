#!/usr/bin/env python3
"""Checks `handgrad export` against transformers (not part of the test suite: it needs
transformers; run it by hand after changing the export or import code).

1. A handgrad checkpoint with random weights (written here in handgrad's weights format,
   docs/formats.md; d_ff = 3 C, so n_inner is exercised), exported with
   `handgrad export`, loads with GPT2LMHeadModel.from_pretrained with no missing,
   unexpected or mismatched weights; its logits equal the project's float64 PyTorch
   reference of the same weights (tools/torch_gpt2.py); its tokenizer gives handgrad's
   ids; and transformers' greedy continuation equals `handgrad generate --temperature 0`.
2. The fixture tests/fixtures/hf_tiny, imported and exported by handgrad, gives
   transformers logits bitwise equal to the original folder's.

Usage: python3 tools/check_hf_export.py [--handgrad build/handgrad]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, GPT2LMHeadModel

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from torch_gpt2 import GPT, GPTConfig  # noqa: E402

FIX = os.path.join(ROOT, "tests", "fixtures", "hf_tiny")
PROMPT = "And the earth was without form, and void"


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, capture_output=True)
    if r.returncode:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr.decode()))
    return r.stdout


def load_hf(path):
    model, info = GPT2LMHeadModel.from_pretrained(path, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit("%s: transformers reports %s" % (path, bad))
    return model.eval()


def check_checkpoint(hg, work):
    cfg = GPTConfig(vocab_size=320, max_seq_len=64, n_layer=2, n_head=2, d_model=64, d_ff=192)
    ref = GPT(cfg, attn_impl="math")
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.1 if name.endswith("bias") else 0.08))
            if ".ln_" in name or name.startswith("ln_f"):
                p.add_(1.0 if name.endswith("weight") else 0.0)
    ckpt = os.path.join(work, "ckpt")
    os.makedirs(ckpt)
    meta = {"format": "handgrad-weights", "version": "1",
            "config": json.dumps(dict(cfg.to_dict(), dropout=0.0), separators=(",", ":"))}
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, os.path.join(ckpt, "model.safetensors"),
              metadata=meta)
    for f in ("vocab.json", "merges.txt"):
        with open(os.path.join(FIX, f), "rb") as src, open(os.path.join(ckpt, f), "wb") as dst:
            dst.write(src.read())
    out = os.path.join(work, "exported")
    run([hg, "export", "--model", os.path.join(ckpt, "model.safetensors"), "--hf", out])

    model = load_hf(out)
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok(PROMPT)["input_ids"]
    hg_ids = [int(v) for v in run([hg, "tokenizer", "encode", "--tokenizer", out], PROMPT.encode()).split()]
    assert ids == hg_ids, (ids, hg_ids)
    x = torch.tensor([ids])
    with torch.no_grad():
        got = model(x).logits[0].double()
        want = ref.double()(x)[0][0]
    err = ((got - want).abs().max() / want.abs().max()).item()
    print("checkpoint export: transformers logits within %.2e of the float64 reference (max |logit| %.2f)"
          % (err, want.abs().max().item()))
    assert err < 1e-5, err

    # greedy: handgrad's bytes equal the bytes of transformers' ids (decoded by handgrad,
    # since transformers' decode replaces invalid UTF-8)
    n = 24
    with torch.no_grad():
        greedy = model.generate(x, max_new_tokens=n, do_sample=False, pad_token_id=tok.eos_token_id)[0, len(ids):]
    text = run([hg, "generate", "--model", out, "--prompt", PROMPT, "--temperature", "0", "--max-new-tokens", str(n),
                "--no-echo", "--ignore-eot"])
    want_text = run([hg, "tokenizer", "decode", "--tokenizer", out], " ".join(map(str, greedy.tolist())).encode())
    assert text == want_text + b"\n", (text, want_text)
    print("checkpoint export: transformers' greedy %d tokens equal handgrad generate's: %s" % (n, greedy.tolist()))


def check_fixture(hg, work):
    out = os.path.join(work, "fixture_export")
    run([hg, "export", "--model", FIX, "--hf", out])
    a, b = load_hf(FIX), load_hf(out)
    x = torch.randint(0, 320, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        la, lb = a(x).logits, b(x).logits
    assert torch.equal(la, lb), (la - lb).abs().max()
    print("fixture round trip: transformers logits bitwise equal before and after handgrad")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--handgrad", default=os.path.join(ROOT, "build", "handgrad"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        check_checkpoint(a.handgrad, work)
        check_fixture(a.handgrad, work)
    print("ok")


if __name__ == "__main__":
    main()
