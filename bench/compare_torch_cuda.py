#!/usr/bin/env python3
"""GPU benchmark: handgrad's CUDA backend (bf16) against PyTorch (bf16 autocast) in one run.

Part "train": GPT-2 small at T=1024, B in {8, 16, 32}: handgrad (`handgrad bench --device
cuda --precision bf16`, eager and with CUDA graphs) against PyTorch eager and torch.compile
(fp32 master weights, bf16 autocast, fused AdamW, clip_grad_norm_, SDPA's flash backend).
Reports ms per step, tokens/s, and MFU against the bf16 matmul ceiling measured in this
run and against the datasheet's dense bf16 peak.

Part "attention": handgrad's flash attention (bench/attention_cuda) against
F.scaled_dot_product_attention's flash, efficient, cudnn and math backends, causal, bf16,
T from 512 to 16384, head sizes 64 and 128, d_model 2048 and B*T = 16384 tokens; TFLOP/s of
forward and of forward+backward (FlashAttention's FLOP count) and peak memory.

Every PyTorch measurement runs in its own process (no compile cache or allocator state is
shared). Times are medians over timed steps after warm-up, CUDA-synchronised.
Usage: bench/compare_torch_cuda.py [--part train|attention|all] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BATCHES = (8, 16, 32)
CTX = 1024
SWEEP_T = (512, 1024, 2048, 4096, 8192, 16384)
SWEEP_HS = (64, 128)
SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")
# Dense bf16 tensor-core peaks from NVIDIA's datasheets (the sparse figures are twice these).
DATASHEET_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("H200", 989.4), ("H800", 989.4))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("train", "attention", "all"), default="all")
    ap.add_argument("--handgrad", default=os.path.join(ROOT, "build", "handgrad"))
    ap.add_argument("--attention-bin", default=os.path.join(ROOT, "build", "bench", "attention_cuda"))
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", help="directory for results.json")
    ap.add_argument("--batches", type=lambda v: [int(x) for x in v.split(",")], default=list(BATCHES),
                    help="batch sizes of --part train, comma-separated (default 8,16,32)")
    ap.add_argument("--sweep-t", type=lambda v: [int(x) for x in v.split(",")], default=list(SWEEP_T),
                    help="sequence lengths of --part attention, comma-separated (default 512,...,16384)")
    ap.add_argument("--sweep-hs", type=lambda v: [int(x) for x in v.split(",")], default=list(SWEEP_HS),
                    help="head sizes of --part attention, comma-separated (default 64,128)")
    ap.add_argument("--sdpa-backends", type=lambda v: v.split(","), default=list(SDPA_BACKENDS),
                    help="SDPA backends of --part attention, comma-separated (default flash,efficient,cudnn,math)")
    ap.add_argument("--worker", choices=("train", "attention", "ceiling"), help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    return ap.parse_args()


# ---------------------------------------------------------------- workers (one process each)

def cuda_time(torch, fn, warmup, steps):
    """Median and mean seconds of fn() over `steps` calls after `warmup`, CUDA-synchronised."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "mean_s": statistics.fmean(times),
            "std_s": statistics.stdev(times) if len(times) > 1 else 0.0}


def worker_ceiling(torch):
    """bf16 matmul ceiling: median of ten 8192^3 products on random data, CUDA events."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    ms = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    t = statistics.median(ms) / 1e3
    name = torch.cuda.get_device_name()
    peak = next((p for key, p in DATASHEET_BF16_TFLOPS if key in name), None)
    return {"device": name, "bf16_matmul_tflops": 2 * n ** 3 / t / 1e12, "datasheet_bf16_tflops": peak,
            "torch_version": torch.__version__}


def worker_train(torch, args):
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from torch_gpt2 import GPT, GPTConfig, param_groups, train_flops
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50304, max_seq_len=1024, n_layer=12, n_head=12, d_model=768, d_ff=3072)
    real = GPTConfig(**{**cfg.to_dict(), "vocab_size": 50257})
    model = GPT(cfg, attn_impl="sdpa").cuda()
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if args.mode == "compile" else model
    B, T = args.batch, CTX
    tokens = torch.randint(0, 50257, (B, T), device="cuda")
    targets = torch.randint(0, 50257, (B, T), device="cuda")

    def forward():
        with torch.autocast("cuda", dtype=torch.bfloat16), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return fwd(tokens, targets)[1]

    def forward_backward():
        opt.zero_grad(set_to_none=True)
        forward().backward()

    def step():
        forward_backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    torch.cuda.reset_peak_memory_stats()
    t = cuda_time(torch, step, args.warmup, args.steps)
    # as handgrad's bench: the forward with the graph kept for backward, and backward as
    # (forward + backward) - forward
    tf = cuda_time(torch, forward, args.warmup, args.steps)["median_s"]
    tfb = cuda_time(torch, forward_backward, args.warmup, args.steps)["median_s"]
    return {"impl": f"torch_{args.mode}", "batch": B, "ctx": T, "train_step": t,
            "tokens_per_s": B * T / t["median_s"], "flops_per_step": train_flops(real, B, T),
            "forward_ms": tf * 1e3, "backward_ms": (tfb - tf) * 1e3,
            "peak_memory_bytes": torch.cuda.max_memory_allocated()}


def attention_flops(B, NH, T, hs):
    return 4.0 * B * NH * T * T * hs * 0.5  # causal


def worker_attention(torch, args):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kinds = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    rows = []
    for hs in args.sweep_hs:
        for T in args.sweep_t:
            NH, B = 2048 // hs, max(1, 16384 // T)
            # q, k, v as views of one (B, T, 3, NH, hs) tensor: the layout handgrad reads in place
            qkv = torch.randn(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            dout = torch.randn(B, NH, T, hs, device="cuda", dtype=torch.bfloat16)
            flops = attention_flops(B, NH, T, hs)
            for name in args.sdpa_backends:
                row = {"impl": f"sdpa_{name}", "T": T, "hs": hs, "B": B, "NH": NH, "causal": 1}
                try:
                    with sdpa_kernel(kinds[name]):
                        def fwd():
                            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                        def fb():
                            qkv.grad = None
                            fwd().backward(dout)

                        with torch.no_grad():
                            tf = cuda_time(torch, fwd, 2, 10)["median_s"]
                        torch.cuda.synchronize()
                        base = torch.cuda.memory_allocated()
                        torch.cuda.reset_peak_memory_stats()
                        tfb = cuda_time(torch, fb, 2, 10)["median_s"]
                        row.update(forward_ms=tf * 1e3, forward_backward_ms=tfb * 1e3, forward_tflops=flops / tf / 1e12,
                                   forward_backward_tflops=3.5 * flops / tfb / 1e12,
                                   bytes=torch.cuda.max_memory_allocated() - base + 4 * qkv.numel() + 2 * dout.numel())
                except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # a backend may refuse a shape or run out
                    row["error"] = str(e).strip().splitlines()[0][:160]
                    torch.cuda.empty_cache()
                rows.append(row)
                print(json.dumps(row), flush=True)  # one JSON line a row
            del qkv, dout
            torch.cuda.empty_cache()
    return rows


def worker(args):
    import torch
    if not torch.cuda.is_available():
        print(json.dumps({"error": "PyTorch sees no CUDA device"}))
        return 1
    try:
        if args.worker == "ceiling":
            out = worker_ceiling(torch)
        elif args.worker == "train":
            out = worker_train(torch, args)
        else:
            worker_attention(torch, args)  # prints its rows as it goes
            return 0
    except Exception as e:  # report, so the table shows what failed
        out = {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"}
    print(json.dumps(out))
    return 0


# ---------------------------------------------------------------- orchestration

def run_json(label, cmd, lines=False):
    """Runs cmd; returns its last JSON line (or every JSON line), or {"error": ...}."""
    print(f"compare_torch_cuda: {label}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    objs = []
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            try:
                objs.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    if not objs:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit status {p.returncode}: {tail}"}
    return objs if lines else objs[-1]


def me(args, *extra):
    sweep = ["--sweep-t", ",".join(map(str, args.sweep_t)), "--sweep-hs", ",".join(map(str, args.sweep_hs)),
             "--sdpa-backends", ",".join(args.sdpa_backends)]
    return [sys.executable, os.path.abspath(__file__), *extra, "--warmup", str(args.warmup), "--steps", str(args.steps),
            *sweep]


def mfu(flops, seconds, tflops):
    return flops / seconds / (tflops * 1e12) if seconds and tflops else None


def rate(r, ceiling):
    """Adds ms per step and MFU to a row that has a step time."""
    t = r.get("train_step", {}).get("median_s") or r.get("train_step", {}).get("mean_s")
    if t:
        r["ms_per_step"] = t * 1e3
        r["mfu_measured"] = mfu(r["flops_per_step"], t, ceiling.get("bf16_matmul_tflops"))
        r["mfu_datasheet"] = mfu(r["flops_per_step"], t, ceiling.get("datasheet_bf16_tflops"))
    return r


def part_train(args, ceiling):
    """Each row is printed as it completes, so a run cut short keeps what it measured."""
    rows = []

    def add(row):
        rows.append(rate(row, ceiling))
        print("row: " + json.dumps({k: row.get(k) for k in ("impl", "batch", "ms_per_step", "forward_ms", "backward_ms",
                                                             "tokens_per_s", "error")}), flush=True)

    for B in args.batches:
        shape = ["--model", "small", "--batch", str(B), "--ctx", str(CTX), "--warmup", str(args.warmup),
                 "--steps", str(args.steps), "--device", "cuda", "--precision", "bf16", "--json"]
        for impl, extra in (("handgrad", []), ("handgrad_graphs", ["--cuda-graphs"])):
            out = run_json(f"{impl} B={B}", [args.handgrad, "bench", *shape, *extra], lines=True)
            by_pass = {o.get("pass"): o for o in out} if isinstance(out, list) else {}
            if "step" in by_pass:  # bench's rows: forward, backward, step (mean seconds)
                st = by_pass["step"]
                r = {"train_step": {"mean_s": st["mean_s"], "std_s": st["std_s"]}, "tokens_per_s": B * CTX / st["mean_s"],
                     "flops_per_step": st["gflop"] * 1e9, "gemm_peak_gflops": st.get("sgemm_peak_gflops"),
                     "forward_ms": by_pass.get("forward", {}).get("mean_s", 0) * 1e3,
                     "backward_ms": by_pass.get("backward", {}).get("mean_s", 0) * 1e3}
            else:
                r = out if isinstance(out, dict) else {"error": "no step row in handgrad bench's output"}
            add({"impl": impl, "batch": B, **r})
        for mode in ("eager", "compile"):
            r = run_json(f"torch {mode} B={B}", me(args, "--worker", "train", "--mode", mode, "--batch", str(B)))
            add({"impl": f"torch_{mode}", "batch": B, **r})
    return rows


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "n/a"


def print_train(rows, ceiling):
    print(f"\nGPT-2 small, T={CTX}, bf16, {ceiling.get('device')}: bf16 matmul ceiling "
          f"{fmt(ceiling.get('bf16_matmul_tflops'), '.0f')} TFLOP/s measured, "
          f"{fmt(ceiling.get('datasheet_bf16_tflops'), '.0f')} datasheet")
    print(f"{'B':>3} {'impl':<16} {'ms/step':>9} {'fwd ms':>8} {'bwd ms':>8} {'bwd/fwd':>7} {'tokens/s':>10} {'MFU meas':>9} "
          f"{'MFU sheet':>9} {'vs compile':>10}")
    for B in sorted({r["batch"] for r in rows}):
        comp = next((r for r in rows if r["batch"] == B and r["impl"] == "torch_compile" and "tokens_per_s" in r), None)
        for r in (r for r in rows if r["batch"] == B):
            if "error" in r:
                print(f"{B:>3} {r['impl']:<16} error: {r['error']}")
                continue
            vs = r["tokens_per_s"] / comp["tokens_per_s"] if comp else None
            f, bw = r.get("forward_ms"), r.get("backward_ms")
            print(f"{B:>3} {r['impl']:<16} {fmt(r.get('ms_per_step'), '.1f'):>9} {fmt(f, '.1f'):>8} {fmt(bw, '.1f'):>8} "
                  f"{fmt(bw / f if f and bw else None, '.2f'):>7} {fmt(r.get('tokens_per_s'), '.0f'):>10} "
                  f"{fmt(r.get('mfu_measured'), '.1%'):>9} {fmt(r.get('mfu_datasheet'), '.1%'):>9} {fmt(vs, '.2f'):>10}")


def print_attention(rows, sweep_t, sweep_hs, backends):
    impls = ["handgrad", "handgrad_deterministic"] + [f"sdpa_{b}" for b in backends]
    for r in rows:
        if "error" in r and "T" not in r:
            print(f"{r['impl']}: error: {r['error']}")
    print("\nAttention, causal, bf16, d_model 2048, B*T=16384: forward+backward TFLOP/s (peak MiB)")
    print(f"{'hs':>4} {'T':>6} " + "".join(f"{i:>24}" for i in impls) + f"{'hg/best':>9}{'det/flash':>10}")
    for hs in sweep_hs:
        for T in sweep_t:
            cells, best, hg, det, flash = [], None, None, None, None
            for i in impls:
                r = next((r for r in rows if r.get("impl") == i and r.get("T") == T and r.get("hs") == hs), {})
                v = r.get("forward_backward_tflops")
                cells.append(f"{fmt(v, '.0f')} ({fmt(r['bytes'] / 2**20 if 'bytes' in r else None, '.0f')})" if v else
                             ("error" if "error" in r else "n/a"))
                if i == "handgrad":
                    hg = v
                elif i == "handgrad_deterministic":
                    det = v
                elif v and (best is None or v > best):
                    best = v
                if i == "sdpa_flash":
                    flash = v
            ratio = hg / best if hg and best else None
            print(f"{hs:>4} {T:>6} " + "".join(f"{c:>24}" for c in cells) + f"{fmt(ratio, '.2f'):>9}"
                  f"{fmt(det / flash if det and flash else None, '.2f'):>10}")
    kernels = {r.get("kernels") for r in rows if r.get("impl") == "handgrad" and r.get("kernels")}
    for k in sorted(kernels):
        print(f"handgrad's kernels: {k}")


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    results = {"ceiling": run_json("bf16 matmul ceiling", me(args, "--worker", "ceiling"))}
    if args.part in ("train", "all"):
        results["train"] = part_train(args, results["ceiling"])
    if args.part in ("attention", "all"):
        hg = run_json("handgrad attention sweep", [args.attention_bin, "--T", ",".join(map(str, args.sweep_t)), "--hs",
                                                    ",".join(map(str, args.sweep_hs))], lines=True)
        sdpa = run_json("torch SDPA sweep", me(args, "--worker", "attention"), lines=True)
        results["attention"] = (hg if isinstance(hg, list) else [{"impl": "handgrad", **hg}]) + \
            (sdpa if isinstance(sdpa, list) else [{"impl": "sdpa", **sdpa}])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"results_{args.part}.json"), "w") as f:
            json.dump(results, f, indent=1)
    if "train" in results:
        print_train(results["train"], results["ceiling"])
    if "attention" in results:
        print_attention(results["attention"], args.sweep_t, args.sweep_hs, args.sdpa_backends)
    return 0


if __name__ == "__main__":
    sys.exit(main())
