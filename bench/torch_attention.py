"""Times PyTorch attention alone on the CPU, forward and backward, for one (head size, T) cell,
printing a row in the schema of `handgrad bench --attention --json`.

impl "naive" spells attention out (scores, causal mask, softmax, weighted sum), storing the
(B, NH, T, T) matrices; "sdpa" is F.scaled_dot_product_attention (torch >= 2.0), whose CPU
kernel is blockwise. Inputs are (B, NH, T, d) q, k, v uniform in [-1, 1), as handgrad's, in
fp32 or (--precision bf16) bf16.
A cell whose naive score matrices cannot fit (three (B, NH, T, T) fp32 matrices live at
once in the backward) reports OOM without running; others run under the memory guard,
which turns an allocation failure into OOM.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=("naive", "sdpa"), default="sdpa")
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--causal", dest="causal", action="store_true", default=True)
    ap.add_argument("--no-causal", dest="causal", action="store_false")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="dtype of q, k, v and dout")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if min(args.head_dim, args.ctx, args.batch, args.heads, args.threads, args.steps) < 1 or args.warmup < 0:
        ap.error("sizes, --threads and --steps must be >= 1, --warmup >= 0")
    return args


def attention_fn(torch, impl, causal, T):
    F = torch.nn.functional
    if impl == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    hidden = torch.ones(T, T, dtype=torch.bool).triu(1) if causal else None

    def naive(q, k, v):
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        if hidden is not None:
            att = att.masked_fill(hidden, float("-inf"))
        return att.softmax(dim=-1) @ v

    return naive


def run(args, torch, row):
    B, NH, T, d = args.batch, args.heads, args.ctx, args.head_dim
    room = tc.guard_memory()
    scores = 4 * B * NH * T * T
    if args.impl == "naive" and 3 * scores > room:
        raise MemoryError(f"three (B, NH, T, T) score matrices need {tc.gib(3 * scores):.1f} GiB, "
                          f"have {tc.gib(room):.1f} GiB")
    if args.impl == "sdpa" and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        raise RuntimeError(f"torch {torch.__version__} has no scaled_dot_product_attention")
    g = torch.Generator().manual_seed(args.seed)
    dt = torch.bfloat16 if args.precision == "bf16" else torch.float32
    q, k, v = (torch.rand(B, NH, T, d, generator=g).mul_(2).sub_(1).to(dt).requires_grad_() for _ in range(3))
    dout = torch.rand(B, NH, T, d, generator=g).mul_(2).sub_(1).to(dt)
    attn = attention_fn(torch, args.impl, args.causal, T)
    state = {}

    def forward():
        state["out"] = attn(q, k, v)

    def backward():
        for t in (q, k, v):
            t.grad = None
        state["out"].backward(dout)

    fwd, bwd = [], []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        forward()
        t1 = time.perf_counter()
        backward()
        t2 = time.perf_counter()
        if i >= args.warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    stat = statistics
    row.update(forward_ms=1e3 * stat.fmean(fwd), forward_std_ms=1e3 * (stat.stdev(fwd) if len(fwd) > 1 else 0.0),
               backward_ms=1e3 * stat.fmean(bwd), backward_std_ms=1e3 * (stat.stdev(bwd) if len(bwd) > 1 else 0.0))


def main():
    args = parse_args()
    tc.set_threads(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    fwd_gflop = 4.0 * args.batch * args.heads * args.ctx**2 * args.head_dim * (0.5 if args.causal else 1.0) / 1e9
    row = {"kind": "attention", "impl": f"torch-{args.impl}", "torch_version": torch.__version__,
           "head_dim": args.head_dim, "heads": args.heads, "batch": args.batch, "ctx": args.ctx,
           "threads": args.threads, "causal": args.causal, "warmup": args.warmup, "steps": args.steps,
           "precision": args.precision,
           "oom": False, "note": "", "forward_gflop": fwd_gflop, "backward_gflop": 2.5 * fwd_gflop}
    status = 0
    try:
        run(args, torch, row)
        f, b = row["forward_ms"], row["backward_ms"]
        row.update(forward_tflops=fwd_gflop / f, backward_tflops=2.5 * fwd_gflop / b,
                   tflops=3.5 * fwd_gflop / (f + b))
    except Exception as e:  # noqa: BLE001
        status = tc.record_failure(row, e)
    row["peak_rss_bytes"] = tc.peak_rss_bytes()
    if args.json:
        print(json.dumps(row))
    else:
        what = (f"forward {row['forward_ms']:.3f} ms, backward {row['backward_ms']:.3f} ms"
                if "forward_ms" in row else row.get("error", row["note"]))
        print(f"{row['impl']} d={args.head_dim} T={args.ctx} B={args.batch}: {what}, "
              f"peak RSS {row['peak_rss_bytes'] / 2**20:.0f} MiB (torch {torch.__version__})")
    return status


if __name__ == "__main__":
    sys.exit(main())
