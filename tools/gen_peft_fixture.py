#!/usr/bin/env python3
"""Writes PEFT LoRA adapters for the Hugging Face fixture folders, with PEFT's float64
trajectories of training them, for tests/test_peft.c.

For each base folder tests/fixtures/hf_<name>/ (llama, qwen2, gemma, phi3; made by
tools/gen_hf_llama_fixture.py):

  peft_<name>/   what PEFT's save_pretrained writes: adapter_config.json and
                 adapter_model.safetensors (float32). r = 4, lora_alpha = 8, no dropout,
                 bias "none", on every attention and MLP linear the family has (Llama,
                 Qwen2, Gemma: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
                 down_proj; Phi-3: its fused qkv_proj and gate_up_proj, o_proj,
                 down_proj). A and B are drawn N(0, 0.3): B is not zero, so the adapter
                 already changes the model and every gradient path is exercised.
  peft_<name>_reference.safetensors:
    tokens, targets  I32 (STEPS, B, T)  a batch for each step (random ids)
    logits           F32 (B*T, V)  the adapted model's logits for step 0's batch, as loaded
                                   (computed in float64, stored rounded)
    loss             F64 (STEPS,)  each step's loss (mean cross-entropy) before its update
    final.<name>     F64  every adapter tensor after STEPS AdamW steps (PEFT's names)
    merged.<name>    F32  the base weight of every adapted module after PEFT's
                          merge_and_unload() of the adapter as loaded (the model's names;
                          computed in float64, stored rounded)

The trajectory runs the base model and the adapter in float64 (transformers' eager
attention), AdamW over the adapters alone (lr 1e-3, betas 0.9 and 0.95, eps 1e-8,
weight decay 0.1, torch's decoupled form) with the gradient norm clipped to 1, as
handgrad's optimizer does. At lr 1e-2 the trajectory is chaotic on these random batches:
Adam turns the fp32-against-float64 rounding of near-zero gradient elements into whole
steps, and handgrad's fp32 losses drifted 1.7e-3 from PEFT's by step 10; at 1e-3 they stay
within 1.5e-5.
Usage: python3 tools/gen_peft_fixture.py [--fixtures tests/fixtures] [--only NAME]
"""
import argparse
import os

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

STEPS, B, T, R, ALPHA = 10, 2, 16, 4, 8
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
SEVEN = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BASES = {
    "llama": (SEVEN, 4101),
    "qwen2": (SEVEN, 4102),
    "gemma": (SEVEN, 4103),
    "phi3": (["qkv_proj", "o_proj", "gate_up_proj", "down_proj"], 4104),
}


def load(folder, dtype):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")


def write(name, fixtures):
    targets, seed = BASES[name]
    folder, out = os.path.join(fixtures, f"hf_{name}"), os.path.join(fixtures, f"peft_{name}")
    gen = torch.Generator().manual_seed(seed)
    config = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=targets, bias="none",
                        task_type="CAUSAL_LM")
    model = get_peft_model(load(folder, torch.float32), config)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    model.peft_config["default"].base_model_name_or_path = f"hf_{name}"  # the folder beside it, not this machine's path
    model.save_pretrained(out)
    os.remove(os.path.join(out, "README.md"))  # PEFT's model card template: nothing the tests read

    vocab = model.config.vocab_size
    tokens = torch.randint(0, vocab, (STEPS, B, T), generator=gen, dtype=torch.int32)
    tgts = torch.randint(0, vocab, (STEPS, B, T), generator=gen, dtype=torch.int32)
    ref = {"tokens": tokens, "targets": tgts}

    # the merged weights of the adapter as loaded
    merged = PeftModel.from_pretrained(load(folder, torch.float64), out, autocast_adapter_dtype=False).double()
    adapted = {n.removeprefix("base_model.model.").replace(".base_layer", "") for n, _ in merged.named_parameters()
               if ".base_layer." in n}
    merged = merged.merge_and_unload()
    for n, p in merged.state_dict().items():
        if n in adapted:
            ref["merged." + n] = p.detach().float().contiguous()

    model = PeftModel.from_pretrained(load(folder, torch.float64), out, is_trainable=True,
                                      autocast_adapter_dtype=False).double()
    trained = [p for n, p in model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    opt = torch.optim.AdamW(trained, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=False)
    losses = []
    for s in range(STEPS):
        logits = model(input_ids=tokens[s].long()).logits
        if s == 0:
            ref["logits"] = logits.detach().reshape(B * T, -1).float()
        loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), tgts[s].reshape(-1).long())
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, CLIP)
        opt.step()
    ref["loss"] = torch.tensor(losses, dtype=torch.float64)
    for n, p in model.named_parameters():
        if p.requires_grad:  # PEFT's saved name: without the adapter's name
            ref["final." + n.replace(".default", "")] = p.detach().clone().contiguous()
    save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(fixtures, f"peft_{name}_reference.safetensors"),
              metadata={"steps": str(STEPS), "lr": str(LR), "weight_decay": str(WD), "clip": str(CLIP)})
    print(f"peft_{name}: {len(trained)} adapter tensors; losses {losses[0]:.6f} -> {losses[-1]:.6f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    ap.add_argument("--only")
    args = ap.parse_args()
    torch.manual_seed(0)
    for name in BASES:
        if not args.only or args.only == name:
            write(name, args.fixtures)


if __name__ == "__main__":
    main()
