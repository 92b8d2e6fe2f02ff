#!/usr/bin/env python3
"""handgrad's LoRA step beside PEFT's on transformers, and beside both sides' full
fine-tunes, on the CPU, in interleaved rounds.

For each model and round every implementation runs once in a fresh process, the order
reversed every other round: `handgrad bench --pass step --json` with --lora SPEC (fp32,
--precision bf16, and bf16 with --base-precision bf16) and without (the full fine-tune,
fp32 and bf16), and bench/torch_peft_step.py for PEFT (eager and torch.compile, fp32,
under bf16 autocast, and under autocast with the base loaded in bf16) and for
transformers' full fine-tune (eager, fp32). Each run reports the median
of its timed steps and the process's peak RSS. Reported per implementation: the step
time of each round, their median, the ratio of handgrad's LoRA step to each peer taken
round by round (the median of the rounds' ratios), and peak RSS.

One `handgrad profile` of the LoRA step per model and precision, after the rounds, gives
the share of the step spent in products and their rate against the GEMM ceiling measured
in that run.

Usage: bench/compare_lora.py [--models cs336-small,smollm-135m] [--batch 4] [--ctx 256]
       [--threads 2] [--rounds 2] [--warmup 1] [--steps 3] [--lora SPEC] [--skip NAMES]
       [--json FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_rows import fmt, med, run_step, seconds  # noqa: E402

ROOT = os.path.dirname(HERE)
SEVEN = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--handgrad", default=os.path.join(ROOT, "build", "handgrad"))
    ap.add_argument("--models", default="cs336-small,smollm-135m")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lora", default=f"r=16,alpha=32,dropout=0.05,targets={SEVEN}")
    ap.add_argument("--skip", default="", help="implementations to leave out, comma-separated")
    ap.add_argument("--json", help="write every run's row here")
    return ap.parse_args()


def impls(args):
    hg = [args.handgrad, "bench", "--pass", "step", "--json", "--warmup", str(args.warmup), "--steps",
          str(args.steps)]
    peft = [sys.executable, os.path.join(HERE, "torch_peft_step.py"), "--json", "--warmup", str(args.warmup),
            "--steps", str(args.steps)]
    lora = ["--lora", args.lora]
    out = [("handgrad lora fp32", hg + lora), ("handgrad lora bf16", hg + lora + ["--precision", "bf16"]),
           ("handgrad lora bf16, base bf16", hg + lora + ["--precision", "bf16", "--base-precision", "bf16"]),
           ("handgrad full fp32", hg), ("handgrad full bf16", hg + ["--precision", "bf16"]),
           ("peft eager fp32", peft + lora), ("peft compile fp32", peft + lora + ["--mode", "compile"]),
           ("peft eager bf16", peft + lora + ["--precision", "bf16"]),
           ("peft compile bf16", peft + lora + ["--mode", "compile", "--precision", "bf16"]),
           ("peft eager bf16, base bf16", peft + lora + ["--precision", "bf16", "--base-dtype", "bf16"]),
           ("peft compile bf16, base bf16", peft + lora + ["--mode", "compile", "--precision", "bf16", "--base-dtype", "bf16"]),
           ("transformers full eager fp32", peft)]
    skip = set(s.strip() for s in args.skip.split(",") if s.strip())
    return [(n, c) for n, c in out if n not in skip]


def products(args, model, precision):
    """From one `handgrad profile` of the LoRA step: the products' share of op time, their
    rate as a share of the GEMM ceiling, and the LoRA ops' share of op time."""
    cmd = [args.handgrad, "profile", "--model", model, "--batch", str(args.batch), "--ctx", str(args.ctx),
           "--threads", str(args.threads), "--steps", "2", "--json", "--lora", args.lora, "--precision", precision]
    print("compare_lora: " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        j = json.loads(p.stdout)
    except json.JSONDecodeError:
        return None
    gemm = [o for o in j["ops"] if o["gemm"]]
    flops = sum(o["gflops"] * o["total_s"] for o in gemm)
    secs = sum(o["total_s"] for o in gemm)
    ops = sum(o["total_s"] for o in j["ops"])  # over the profiled steps, as each op's total_s
    lora = sum(o["total_s"] for o in gemm if o["name"].startswith("lora"))
    base = [o for o in gemm if not o["name"].startswith("lora")]
    base_rate = sum(o["gflops"] * o["total_s"] for o in base) / max(sum(o["total_s"] for o in base), 1e-12)
    return {"gemm_share": secs / ops, "gemm_ceiling": flops / secs / j["ceilings"]["gemm_gflops"],
            "base_gemm_ceiling": base_rate / j["ceilings"]["gemm_gflops"], "lora_share": lora / ops,
            "ceiling_gflops": j["ceilings"]["gemm_gflops"]}


def main():
    args = parse_args()
    shape = ["--batch", str(args.batch), "--ctx", str(args.ctx), "--threads", str(args.threads)]
    rows = {}
    for r in range(args.rounds):
        for model in args.models.split(","):
            order = impls(args)
            for name, cmd in (order if r % 2 == 0 else order[::-1]):
                row = run_step(cmd + ["--model", model] + shape, "compare_lora")
                rows.setdefault((model, name), []).append(row)
                print("run: " + json.dumps({"round": r + 1, "model": model, "impl": name, "s": seconds(row),
                                            "peak_rss_bytes": row.get("peak_rss_bytes"), "error": row.get("error")}),
                      flush=True)
    prof = {(m, p): products(args, m, p) for m in args.models.split(",") for p in ("fp32", "bf16")}
    print(f"\n{time.strftime('%Y-%m-%d')}: B={args.batch}, T={args.ctx}, {args.threads} threads; LoRA {args.lora}; "
          f"{args.rounds} rounds, each the median of {args.steps} steps after {args.warmup} warm-up")
    for model in args.models.split(","):
        print(f"\n{model}")
        print(f"{'impl':<30} {'step s by round':<24} {'median':>8} {'lora fp32 x':>12} {'lora bf16 x':>12} "
              f"{'peak RSS MiB':>13} {'trained':>10}")
        ours = {p: [seconds(x) for x in rows.get((model, f"handgrad lora {p}"), [])] for p in ("fp32", "bf16")}
        for name, _ in impls(args):
            runs = rows.get((model, name), [])
            per = [seconds(x) for x in runs]
            # how many times faster handgrad's LoRA step is than this one, round by round
            sp = {p: med([t / o if t and o else None for t, o in zip(per, ours[p])]) for p in ours}
            rss = med([x.get("peak_rss_bytes") for x in runs])
            trained = med([x.get("trained_params") for x in runs])
            err = next((x["error"] for x in runs if "error" in x), None)
            print(f"{name:<30} {' '.join(fmt(t, '.3f') for t in per):<24} {fmt(med(per), '.3f'):>8} "
                  f"{fmt(sp['fp32'], '.3f'):>12} {fmt(sp['bf16'], '.3f'):>12} "
                  f"{fmt(rss / 2**20 if rss else None, '.0f'):>13} {fmt(trained / 1e6 if trained else None, '.2f'):>9}M"
                  + (f"  error: {err}" if err else ""))
        for p in ("fp32", "bf16"):
            q = prof[(model, p)]
            if q:
                print(f"handgrad lora {p} profile: products {100 * q['gemm_share']:.1f}% of op time at "
                      f"{100 * q['gemm_ceiling']:.1f}% of the {q['ceiling_gflops']:.0f} GFLOP/s ceiling (the base's "
                      f"{100 * q['base_gemm_ceiling']:.1f}%); LoRA ops {100 * q['lora_share']:.1f}% of op time")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": [{"model": k[0], "impl": k[1], "rounds": v} for k, v in rows.items()],
                       "profiles": [{"model": k[0], "precision": k[1], **(v or {})} for k, v in prof.items()]},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
