"""Times GPT-2 training steps in PyTorch on the CPU, reporting the same JSON fields as `handgrad bench`.

The vocabulary is padded to a multiple of 64 (50257 -> 50304, as nanoGPT does), which makes
PyTorch's GEMMs faster; tokens and targets are still drawn from the real vocabulary, and
model_gflop_per_step counts the real vocabulary, as handgrad does. Attention is
F.scaled_dot_product_attention(is_causal=True), PyTorch's fastest CPU path.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time
import traceback

PRESETS = {  # d_model, d_ff, layers, heads
    "small": (768, 3072, 12, 12),
    "medium": (1024, 4096, 24, 16),
    "large": (1280, 5120, 36, 20),
    "xl": (1600, 6400, 48, 25),
    "2.7B": (2560, 10240, 32, 32),
}
VOCAB = 50257
MAX_SEQ_LEN = 1024
VOCAB_MULTIPLE = 64


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(PRESETS), help="preset shape; the flags below override it")
    ap.add_argument("--d-model", type=int)
    ap.add_argument("--d-ff", type=int, help="default 4 * d_model")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--vocab", type=int, default=VOCAB, help="real vocabulary before padding")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object and nothing else")
    args = ap.parse_args()

    shape = dict(zip(("d_model", "d_ff", "layers", "heads"), PRESETS[args.model])) if args.model else {}
    for k in ("d_model", "d_ff", "layers", "heads"):
        if getattr(args, k) is not None:
            shape[k] = getattr(args, k)
    missing = [k for k in ("d_model", "layers", "heads") if k not in shape]
    if missing:
        ap.error("give --model or all of --d-model --layers --heads (missing: %s)" % ", ".join(missing))
    shape.setdefault("d_ff", 4 * shape["d_model"])
    overridden = args.model and tuple(shape[k] for k in ("d_model", "d_ff", "layers", "heads")) != PRESETS[args.model]
    args.model_name = args.model if args.model and not overridden else \
        "d{d_model}-f{d_ff}-l{layers}-h{heads}".format(**shape)
    args.shape = shape
    if not 1 <= args.ctx <= MAX_SEQ_LEN:
        ap.error(f"--ctx must be in [1, {MAX_SEQ_LEN}]")
    if args.batch < 1 or args.threads < 1 or args.warmup < 0 or args.steps < 1:
        ap.error("--batch, --threads and --steps must be >= 1, --warmup >= 0")
    return args


def mem_available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def timed(fn, warmup, steps):
    """Runs fn warmup + steps times; returns (warmup seconds, {mean_s, std_s} over steps)."""
    t0 = time.perf_counter()
    for _ in range(warmup):
        fn()
    warm = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    std = statistics.stdev(times) if len(times) > 1 else 0.0
    return warm, {"mean_s": statistics.fmean(times), "std_s": std}


def run(args, torch, result):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
    from torch_gpt2 import GPT, GPTConfig, param_count, param_groups, train_flops

    s = args.shape
    padded = math.ceil(args.vocab / VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    cfg = GPTConfig(vocab_size=padded, max_seq_len=MAX_SEQ_LEN, n_layer=s["layers"], n_head=s["heads"],
                    d_model=s["d_model"], d_ff=s["d_ff"])
    real = GPTConfig(**{**cfg.to_dict(), "vocab_size": args.vocab})
    result.update(config=real.to_dict(), vocab_padded=padded)

    # Parameters, grads and AdamW's two moments alone need 16 bytes a parameter.
    need, avail = 16 * param_count(cfg), mem_available_bytes()
    if avail is not None and need > avail:
        raise MemoryError(f"parameters, grads and AdamW state need {need / 2**30:.1f} GiB; "
                          f"{avail / 2**30:.1f} GiB available")

    torch.manual_seed(args.seed)
    model = GPT(cfg, attn_impl="sdpa")
    B, T = args.batch, args.ctx
    tokens = torch.randint(0, args.vocab, (B, T))
    targets = torch.randint(0, args.vocab, (B, T))
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    result["optimizer"] = {"name": "AdamW", "foreach": opt.defaults["foreach"], "fused": opt.defaults["fused"]}
    try:  # None above means PyTorch chooses; record what it chooses for these tensors (private helper)
        from torch.optim.optimizer import _default_to_fused_or_foreach
        fused, foreach = _default_to_fused_or_foreach(list(model.parameters()), differentiable=False, use_fused=False)
        result["optimizer"].update(default_fused=fused, default_foreach=foreach)
    except (ImportError, TypeError):
        pass
    fwd = torch.compile(model) if args.mode == "compile" else model

    def forward():
        fwd(tokens, targets)

    def forward_backward():
        opt.zero_grad(set_to_none=True)  # microseconds; backward then allocates grads as in a train step
        _, loss = fwd(tokens, targets)
        loss.backward()

    def train_step():
        opt.zero_grad(set_to_none=True)
        _, loss = fwd(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    warm_total = 0.0
    for name, fn in (("forward", forward), ("forward_backward", forward_backward), ("train_step", train_step)):
        warm, result[name] = timed(fn, args.warmup, args.steps)
        warm_total += warm
    result["warmup_s"] = warm_total
    flops = train_flops(real, B, T)
    result["tokens_per_s"] = B * T / result["train_step"]["mean_s"]
    result["model_gflop_per_step"] = flops / 1e9
    result["achieved_gflops"] = flops / 1e9 / result["train_step"]["mean_s"]


def main():
    args = parse_args()
    # Thread counts must be in the environment before torch (and its OpenMP) loads.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)

    result = {"model": args.model_name, "impl": f"torch-{args.mode}", "torch_version": torch.__version__,
              "batch": args.batch, "ctx": args.ctx, "threads": args.threads,
              "forward_note": "training forward with grad enabled, graph discarded"}
    status = 0
    try:
        run(args, torch, result)
    except Exception as e:  # compile needs a working C++ toolchain; report rather than crash
        traceback.print_exc()
        result["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        status = 1
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    if args.json:
        print(json.dumps(result))
    elif "error" in result:
        print(f"{result['impl']} {result['model']}: error: {result['error']}", file=sys.stderr)
    else:
        print(f"{result['impl']} {result['model']} B={args.batch} T={args.ctx} threads={args.threads} "
              f"torch {result['torch_version']} (vocab padded {args.vocab} -> {result['vocab_padded']})")
        for k in ("forward", "forward_backward", "train_step"):
            print(f"  {k:<17} {result[k]['mean_s']:.4f} s +- {result[k]['std_s']:.4f}")
        print(f"  forward: {result['forward_note']}; warmup took {result['warmup_s']:.1f} s")
        print(f"  {result['tokens_per_s']:.0f} tokens/s, {result['achieved_gflops']:.1f} GFLOP/s "
              f"({result['model_gflop_per_step']:.1f} GFLOP/step), peak RSS {result['peak_rss_bytes'] / 2**20:.0f} MiB")
    sys.exit(status)


if __name__ == "__main__":
    main()
