#!/usr/bin/env python3
"""Checks that PEFT reads the adapters handgrad writes as handgrad computes them (not part
of the test suite: it needs PEFT and transformers; run it by hand after changing
src/io/peft.c or the LoRA step).

For each fixture folder (tests/fixtures/hf_llama, hf_qwen2, hf_gemma, hf_phi3):
1. `handgrad train --init-from-hf DIR --lora ...` trains adapters on every linear layer
   for 10 steps (data prepared with the folder's tokenizer), so A and B are far from
   their initial values;
2. `handgrad export --peft` writes them as a PEFT folder, `export --hf --merge` writes
   handgrad's merged model;
3. in float64, peft.PeftModel.from_pretrained(base, adapter) must load with no missing
   or unexpected adapter tensor, every adapter equal to handgrad's bit for bit, and give
   logits within 1e-5 (relative to the largest) of handgrad's merged model's logits under
   transformers, and of PEFT's own merge_and_unload.

The merged folder is handgrad's model (test_train_cli checks its logits against the
adapted model's); test_peft checks handgrad's logits against PEFT's on PEFT's own
folders.

Usage: python3 tools/check_peft_export.py [--handgrad build/handgrad]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import torch
import transformers
import peft
from safetensors.torch import load_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
TARGETS = {"hf_llama": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
           "hf_qwen2": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
           "hf_gemma": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
           "hf_phi3": "qkv_proj,o_proj,gate_up_proj,down_proj"}
TEXT = " ".join("the lord said unto moses and he went up into the mountain of god".split() * 400)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--handgrad", default=os.path.join(ROOT, "build", "handgrad"))
    args = ap.parse_args()
    torch.manual_seed(0)
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as f:
            f.write(TEXT + "\n")
        for name, targets in TARGETS.items():
            base = os.path.join(FIX, name)
            d = os.path.join(tmp, name)
            run([args.handgrad, "prepare", "--quiet", "--tokenizer", base, "--out", d + "_data", "--val-fraction", "0",
                 corpus])
            run([args.handgrad, "train", "--init-from-hf", base, "--lora", f"r=4,alpha=8,targets={targets}",
                 "--train", d + "_data/train_*.bin", "--ctx", "32", "--batch", "2", "--threads", "2", "--lr", "1e-2",
                 "--warmup-steps", "1", "--lr-schedule", "constant", "--eval-every", "0", "--max-steps", "10",
                 "--out", d + "_run"])
            run([args.handgrad, "export", "--model", d + "_run", "--peft", d + "_peft"])
            run([args.handgrad, "export", "--model", d + "_run", "--hf", d + "_merged", "--merge"])

            model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float64)
            adapted = peft.PeftModel.from_pretrained(model, d + "_peft")
            ours = load_file(os.path.join(d + "_peft", "adapter_model.safetensors"))
            theirs = {k.replace(".default", ""): v for k, v in adapted.state_dict().items() if "lora_" in k}
            assert set(ours) == set(theirs), (name, set(ours) ^ set(theirs))
            for k, v in ours.items():
                assert torch.equal(v.double(), theirs[k]), (name, k)
            moved = max(float(v.abs().max()) for k, v in ours.items() if "lora_B" in k)
            tok = torch.randint(0, model.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
            with torch.no_grad():
                want = adapted(input_ids=tok).logits
                merged_hg = transformers.AutoModelForCausalLM.from_pretrained(d + "_merged", dtype=torch.float64)
                got = merged_hg(input_ids=tok).logits
                merged_peft = adapted.merge_and_unload()
                theirs_merged = merged_peft(input_ids=tok).logits
            scale = float(want.abs().max())
            e1 = float((got - want).abs().max()) / scale
            e2 = float((got - theirs_merged).abs().max()) / scale
            worst = max(worst, e1, e2)
            print(f"{name}: {len(ours)} adapter tensors equal (largest |B| {moved:.3g}); handgrad's merged logits "
                  f"against PEFT's adapted model {e1:.2e}, against PEFT's merge_and_unload {e2:.2e}")
    ok = worst <= 1e-5
    print(("ok" if ok else "FAILED") + f": worst {worst:.2e} (tolerance 1e-5)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
