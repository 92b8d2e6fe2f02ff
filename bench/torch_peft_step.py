"""Times a LoRA training step of PEFT on transformers (or a full fine-tune of the same
transformers model) on the CPU, printing one row in the schema of `handgrad bench --json`.

The model is a LlamaForCausalLM of one of handgrad's Llama-shaped presets, random
weights from --seed: cs336-small (d 768, 12 layers, 12 heads, d_ff 3072, V 10000,
untied) and smollm-135m (d 576, 30 layers, 9 heads of which 3 key/value heads, d_ff
1536, V 49152, tied), as `handgrad bench --model NAME` builds them. --lora takes
handgrad's spec (r=16,alpha=32,dropout=0.05,targets=q_proj,...) and becomes a
peft.LoraConfig; without it every weight trains. The step is what handgrad's bench step
does: zero_grad, forward with the cross-entropy of the given targets, backward, clip the
gradient norm at 1, AdamW. --precision bf16 runs the forward and the loss under
torch.autocast("cpu", dtype=torch.bfloat16), fp32 weights (the PEFT-plus-autocast
setting); --base-dtype bf16 also loads the base in bf16 (PEFT keeps the adapters in fp32,
its autocast_adapter_dtype), as handgrad's --base-precision bf16 holds it. --mode compile
wraps the model in torch.compile.

Usage: bench/torch_peft_step.py --model cs336-small [--lora SPEC] [--batch 4] [--ctx 256]
       [--threads 2] [--mode eager|compile] [--precision fp32|bf16] [--base-dtype fp32|bf16]
       [--warmup 1] [--steps 3]
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_common as tc  # noqa: E402

# hidden, layers, heads, kv heads, intermediate, vocab, max positions, tied
PRESETS = {
    "cs336-small": (768, 12, 12, 12, 3072, 10000, 1024, False),
    "smollm-135m": (576, 30, 9, 3, 1536, 49152, 2048, True),
}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(PRESETS), required=True)
    ap.add_argument("--lora", help="handgrad's spec: r=16,alpha=32,dropout=0.05,targets=q_proj,v_proj")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--base-dtype", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: the frozen base in bf16 (with --lora and --precision bf16)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="the JSON row only")
    return ap.parse_args()


def lora_config(spec):
    """handgrad's --lora spec as keyword arguments of peft.LoraConfig."""
    out = {"r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": []}
    in_targets = False
    for kv in spec.split(","):
        if "=" not in kv and in_targets:
            out["target_modules"].append(kv)
            continue
        k, v = kv.split("=", 1)
        in_targets = k == "targets"
        if k == "targets":
            out["target_modules"].append(v)
        elif k == "r":
            out["r"] = int(v)
        elif k == "alpha":
            out["lora_alpha"] = float(v)
        elif k == "dropout":
            out["lora_dropout"] = float(v)
        elif k == "rslora":
            out["use_rslora"] = v == "true"
        elif k == "init":
            out["init_lora_weights"] = "gaussian" if v == "gaussian" else True
        else:
            raise SystemExit(f"--lora: unknown key {k}")
    return out


def run(args, torch, row):
    import transformers
    hidden, layers, heads, kv, inter, vocab, tmax, tied = PRESETS[args.model]
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                                   num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                                   max_position_embeddings=tmax, rms_norm_eps=1e-5, rope_theta=10000.0,
                                   tie_word_embeddings=tied, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"  # PyTorch's fastest CPU attention
    torch.manual_seed(args.seed)
    model = transformers.LlamaForCausalLM(cfg)
    model.config.use_cache = False
    if args.base_dtype == "bf16":
        if not args.lora or args.precision != "bf16":
            raise SystemExit("--base-dtype bf16 needs --lora and --precision bf16")
        model = model.to(torch.bfloat16)
    if args.lora:
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(task_type="CAUSAL_LM", **lora_config(args.lora)))
        row["peft_version"] = peft.__version__
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    row["params"] = sum(p.numel() for p in model.parameters())
    row["trained_params"] = sum(p.numel() for p in params)
    B, T = args.batch, args.ctx
    tokens = torch.randint(0, vocab, (B, T))
    targets = torch.randint(0, vocab, (B, T))
    compiled = torch.compile(model) if args.mode == "compile" else model
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = compiled(input_ids=tokens).logits
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    ts = tc.times(step, args.warmup, args.steps)
    row.update(mean_s=statistics.fmean(ts), median_s=statistics.median(ts),
               std_s=statistics.stdev(ts) if len(ts) > 1 else 0.0, times_s=ts)


def main():
    args = parse_args()
    tc.set_threads(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    import transformers
    row = {"kind": "model", "impl": ("peft" if args.lora else "transformers-full") + f"-{args.mode}",
           "torch_version": torch.__version__, "transformers_version": transformers.__version__,
           "model": args.model, "batch": args.batch, "ctx": args.ctx, "threads": args.threads, "pass": "step",
           "warmup": args.warmup, "steps": args.steps, "precision": args.precision, "base_dtype": args.base_dtype, "lora": args.lora or "",
           "oom": False, "note": ""}
    status = 0
    try:
        run(args, torch, row)
    except Exception as e:  # noqa: BLE001 - report rather than crash
        status = tc.record_failure(row, e)
    row["peak_rss_bytes"] = tc.peak_rss_bytes()
    if args.json:
        print(json.dumps(row))
    else:
        t = f"median {row['median_s']:.4f} s" if "median_s" in row else row.get("error", row["note"])
        print(f"{row['impl']} {args.model} B={args.batch} T={args.ctx} {args.threads} threads {args.precision}: {t}, "
              f"peak RSS {row['peak_rss_bytes'] / 2**20:.0f} MiB, {row.get('trained_params', 0) / 1e6:.2f}M trained")
    return status


if __name__ == "__main__":
    sys.exit(main())
