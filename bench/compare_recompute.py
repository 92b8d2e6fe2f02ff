#!/usr/bin/env python3
"""Recomputation's trade, measured: handgrad's training step under each --recompute mode
beside PyTorch eager with and without torch.utils.checkpoint on every block, on the CPU,
in interleaved rounds.

For each model and round, every implementation runs once in a fresh process (`handgrad
bench --pass step --json`, bench/torch_step.py --pass step): the order within a round is
reversed every other round. Reported per implementation: the step time of each round and
their median; its ratio to handgrad's `none` taken round by round (median of the rounds'
ratios); the activation bytes the plan keeps for the backward (handgrad's own plan,
hg_memory_plan.activations) and their ratio to `none`; and the process's peak RSS, the
one memory figure measured the same way on both sides.

Usage: bench/compare_recompute.py [--models small,cs336-small] [--batch 4] [--ctx 1024]
       [--threads 2] [--rounds 2] [--warmup 1] [--steps 2] [--json FILE]
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_rows import fmt, med, run_step, seconds  # noqa: E402

ROOT = os.path.dirname(HERE)
MODES = ("none", "attn", "mlp", "block")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--handgrad", default=os.path.join(ROOT, "build", "handgrad"))
    ap.add_argument("--models", default="small,cs336-small")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--no-torch", action="store_true", help="handgrad's modes alone")
    ap.add_argument("--json", help="write every run's row here")
    return ap.parse_args()


def impls(args):
    out = [(f"handgrad {m}", [args.handgrad, "bench", "--recompute", m]) for m in MODES]
    if not args.no_torch:
        step = [sys.executable, os.path.join(HERE, "torch_step.py"), "--mode", "eager"]
        out += [("torch eager", step), ("torch eager checkpoint", step + ["--checkpoint"])]
    return out


def main():
    args = parse_args()
    shape = ["--batch", str(args.batch), "--ctx", str(args.ctx), "--threads", str(args.threads), "--warmup",
             str(args.warmup), "--steps", str(args.steps), "--pass", "step", "--json"]
    rows = {}
    for r in range(args.rounds):
        for model in args.models.split(","):
            order = impls(args)
            for name, cmd in (order if r % 2 == 0 else order[::-1]):
                row = run_step(cmd + ["--model", model] + shape, "compare_recompute")
                rows.setdefault((model, name), []).append(row)
                print("run: " + json.dumps({"round": r + 1, "model": model, "impl": name, "s": seconds(row),
                                            "activations_bytes": row.get("activations_bytes"),
                                            "peak_rss_bytes": row.get("peak_rss_bytes"), "error": row.get("error")}),
                      flush=True)
    print(f"\n{time.strftime('%Y-%m-%d')}: B={args.batch}, T={args.ctx}, {args.threads} threads, fp32; {args.rounds} "
          f"rounds, each the median of {args.steps} steps after {args.warmup} warm-up")
    for model in args.models.split(","):
        base = rows.get((model, "handgrad none"), [])
        base_act = med([x.get("activations_bytes") for x in base])
        print(f"\n{model}")
        print(f"{'impl':<24} {'step s by round':<22} {'median':>8} {'vs none':>8} {'kept act MiB':>13} "
              f"{'vs none':>8} {'peak RSS MiB':>13}")
        for name, _ in impls(args):
            runs = rows.get((model, name), [])
            per = [seconds(x) for x in runs]
            ratios = [t / b if t and b else None for t, b in zip(per, [seconds(x) for x in base])]
            act = med([x.get("activations_bytes") for x in runs])
            rss = med([x.get("peak_rss_bytes") for x in runs])
            err = next((x["error"] for x in runs if "error" in x), None)
            print(f"{name:<24} {' '.join(fmt(t, '.2f') for t in per):<22} {fmt(med(per), '.2f'):>8} "
                  f"{fmt(med(ratios), '.3f'):>8} {fmt(act / 2**20 if act else None, '.1f'):>13} "
                  f"{fmt(act / base_act if act and base_act else None, '.3f'):>8} "
                  f"{fmt(rss / 2**20 if rss else None, '.0f'):>13}" + (f"  error: {err}" if err else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"model": k[0], "impl": k[1], "rounds": v} for k, v in rows.items()], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
