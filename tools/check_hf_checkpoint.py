#!/usr/bin/env python3
"""Checks that `handgrad train`'s checkpoint folders load in transformers as they are
(not part of the test suite: it needs transformers; run it by hand after changing the
checkpoint, export or config.json code).

For a GPT-2 model and a Llama-family model (RMSNorm, RoPE, SwiGLU, grouped-query
attention, untied head), each trained a few steps on a tokenizer and shards made here
from README.md:
1. AutoModelForCausalLM.from_pretrained(ckpt_dir) loads the folder with no missing,
   unexpected or mismatched weights, as the class config.json names;
2. AutoTokenizer.from_pretrained(ckpt_dir) gives the ids `handgrad tokenizer encode`
   gives for a prompt;
3. transformers' greedy continuation of that prompt equals
   `handgrad generate --model ckpt_dir --temperature 0`.

Usage: python3 tools/check_hf_checkpoint.py [--handgrad build/handgrad]
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROMPT = "The library never prints and never exits"
NEW = 24


def run(cmd):
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr.decode()))
    return r.stdout


def check(hg, work, name, model_args):
    out = os.path.join(work, name)
    run([hg, "train", "--train", os.path.join(work, "data", "train_*.bin"), "--out", out, "--ctx", "64",
         "--tokenizer", os.path.join(work, "tok"),
         "--batch", "4", "--max-steps", "4", "--lr", "3e-3", "--threads", "2", "--peak-gflops", "100"] + model_args)
    ckpt = sorted(glob.glob(os.path.join(out, "ckpt_*")))[-1]
    model, info = AutoModelForCausalLM.from_pretrained(ckpt, output_loading_info=True, dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit("%s: from_pretrained(%s) reports %s" % (name, ckpt, bad))
    tok = AutoTokenizer.from_pretrained(ckpt)
    ids = tok(PROMPT)["input_ids"]
    enc = subprocess.run([hg, "tokenizer", "encode", "--tokenizer", ckpt], input=PROMPT.encode(), capture_output=True)
    if enc.returncode:
        sys.exit("%s: handgrad tokenizer encode failed: %s" % (name, enc.stderr.decode()))
    hg_ids = [int(x) for x in enc.stdout.split()]
    if hg_ids != ids:
        sys.exit("%s: ids differ: transformers %s, handgrad %s" % (name, ids, hg_ids))
    with torch.no_grad():
        g = model.generate(torch.tensor([ids]), max_new_tokens=NEW, do_sample=False, eos_token_id=None,
                           pad_token_id=0)
    want = tok.decode(g[0][len(ids):])
    got = run([hg, "generate", "--model", ckpt, "--prompt", PROMPT, "--temperature", "0", "--max-new-tokens",
               str(NEW), "--no-echo", "--ignore-eot", "--threads", "2"]).decode()
    if got.strip() != want.strip():
        sys.exit("%s: greedy continuations differ:\n  transformers %r\n  handgrad     %r" % (name, want, got))
    print("%s: %s loads as %s; ids and %d greedy tokens agree" % (name, os.path.basename(ckpt),
                                                                  type(model).__name__, NEW))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--handgrad", default=os.path.join(ROOT, "build", "handgrad"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        corpus = os.path.join(work, "corpus.txt")
        with open(os.path.join(ROOT, "README.md")) as f, open(corpus, "w") as g:
            g.write(f.read() * 4)
        run([a.handgrad, "tokenizer", "train", "--vocab-size", "400", "--out", os.path.join(work, "tok"), corpus])
        run([a.handgrad, "prepare", "--tokenizer", os.path.join(work, "tok"), "--out", os.path.join(work, "data"),
             corpus])
        check(a.handgrad, work, "gpt2", ["--n-layer", "2", "--n-head", "2", "--d-model", "32"])
        check(a.handgrad, work, "llama", ["--model", "llama-tiny", "--arch", "n_kv_head=2"])
    print("checkpoint folders load in transformers")


if __name__ == "__main__":
    main()
