#!/usr/bin/env python3
"""GPU benchmark: handgrad's CUDA backend (bf16) against PyTorch (bf16 autocast) in one run.

Part "train": a model at T=1024, B in {8, 16, 32}: handgrad (`handgrad bench --device
cuda --precision bf16`, eager and with CUDA graphs) against PyTorch eager and torch.compile
(fp32 master weights, bf16 autocast, fused AdamW, clip_grad_norm_). --model picks it:
GPT-2 small (the default; tools/torch_gpt2.py, SDPA's flash backend), the CS336 model
(cs336-small, cs336-medium; tools/torch_cs336.py, the CPU comparison's peer, SDPA's flash
backend) or SmolLM-135M's shape (smollm-135m: transformers' LlamaForCausalLM, grouped-query
attention, SDPA's choice of backend). Reports ms per step, tokens/s, and MFU against the
bf16 matmul ceiling measured in this run and against the datasheet's dense bf16 peak.

--seed-table: the CS336 benchmark's table (Model, Pass, Warmup, Mean (s), Std (s)) of
handgrad on the GPU for cs336-small and cs336-medium, forward and backward, warm-ups 0
and 1, batch 4 and context 256 unless --batches / --ctx say otherwise.

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
# --model: handgrad's preset and PyTorch's model of the same shape (vocabulary padded to 64
# on PyTorch's side, as its GPT-2 runs always were)
TRAIN_MODELS = {
    "small": ("gpt2", dict(vocab=50257, n_layer=12, n_head=12, n_kv_head=12, d_model=768, d_ff=3072)),
    "cs336-small": ("cs336", dict(vocab=10000, n_layer=12, n_head=12, n_kv_head=12, d_model=768, d_ff=3072)),
    "cs336-medium": ("cs336", dict(vocab=10000, n_layer=24, n_head=16, n_kv_head=16, d_model=1024, d_ff=4096)),
    "smollm-135m": ("llama", dict(vocab=49152, n_layer=30, n_head=9, n_kv_head=3, d_model=576, d_ff=1536)),
}
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
    ap.add_argument("--batches", type=lambda v: [int(x) for x in v.split(",")], default=None,
                    help="batch sizes of --part train, comma-separated (default 8,16,32; 4 with --seed-table)")
    ap.add_argument("--model", choices=sorted(TRAIN_MODELS), default="small", help="the model of --part train")
    ap.add_argument("--ctx", type=int, default=None, help="context of --part train (default 1024; 256 with --seed-table)")
    ap.add_argument("--seed-table", action="store_true", help="print the CS336 benchmark table of handgrad on the GPU")
    ap.add_argument("--sweep-t", type=lambda v: [int(x) for x in v.split(",")], default=list(SWEEP_T),
                    help="sequence lengths of --part attention, comma-separated (default 512,...,16384)")
    ap.add_argument("--sweep-hs", type=lambda v: [int(x) for x in v.split(",")], default=list(SWEEP_HS),
                    help="head sizes of --part attention, comma-separated (default 64,128)")
    ap.add_argument("--sdpa-backends", type=lambda v: v.split(","), default=list(SDPA_BACKENDS),
                    help="SDPA backends of --part attention, comma-separated (default flash,efficient,cudnn,math)")
    ap.add_argument("--worker", choices=("train", "attention", "ceiling"), help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.batches is None:
        args.batches = [4] if args.seed_table else list(BATCHES)
    if args.ctx is None:
        args.ctx = 256 if args.seed_table else CTX
    return args


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


def train_model(torch, name, T):
    """PyTorch's model of handgrad's preset `name`: (model, its AdamW parameter groups,
    flops(B) of one training step counted as hg_train_flops counts them, the SDPA backends
    to allow or None for SDPA's own choice)."""
    from torch.nn.attention import SDPBackend
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    arch, s = TRAIN_MODELS[name]
    padded = -(-s["vocab"] // 64) * 64
    if arch in ("gpt2", "cs336"):
        if arch == "gpt2":
            from torch_gpt2 import GPT as Model, GPTConfig as Config, param_groups, train_flops
        else:
            from torch_cs336 import CS336LM as Model, CS336Config as Config, param_groups, train_flops
        shape = dict(max_seq_len=max(T, 1024), n_layer=s["n_layer"], n_head=s["n_head"], d_model=s["d_model"],
                     d_ff=s["d_ff"])
        model = Model(Config(vocab_size=padded, **shape), attn_impl="sdpa")
        real = Config(vocab_size=s["vocab"], **shape)
        return model, param_groups(model, 0.1), lambda B: train_flops(real, B, T), [SDPBackend.FLASH_ATTENTION]
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=padded, hidden_size=s["d_model"], intermediate_size=s["d_ff"],
                      num_hidden_layers=s["n_layer"], num_attention_heads=s["n_head"],
                      num_key_value_heads=s["n_kv_head"], max_position_embeddings=2048, rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    llama = LlamaForCausalLM(cfg)

    class Next(torch.nn.Module):
        """(logits, mean cross-entropy of targets), as handgrad's and the other peers' forward."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, tokens, targets):
            logits = self.m(input_ids=tokens).logits
            return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())

    model = Next(llama)
    decay = [p for n, p in llama.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in llama.named_parameters() if p.dim() < 2]
    # 6 N tokens (the tied embedding counted once, as the lm_head) + 12 L C T tokens
    n = sum(p.numel() for p in llama.parameters()) - (padded - s["vocab"]) * s["d_model"]
    return (model, [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
            lambda B: 6.0 * n * B * T + 12.0 * s["n_layer"] * s["d_model"] * T * B * T, None)


def worker_train(torch, args):
    from torch.nn.attention import sdpa_kernel
    import contextlib

    torch.manual_seed(0)
    model, groups, flops, backends = train_model(torch, args.model, args.ctx)
    model = model.cuda()
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    fwd = torch.compile(model) if args.mode == "compile" else model
    B, T, V = args.batch, args.ctx, TRAIN_MODELS[args.model][1]["vocab"]
    tokens = torch.randint(0, V, (B, T), device="cuda")
    targets = torch.randint(0, V, (B, T), device="cuda")

    def forward():
        with torch.autocast("cuda", dtype=torch.bfloat16), (sdpa_kernel(backends) if backends else
                                                            contextlib.nullcontext()):
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
            "tokens_per_s": B * T / t["median_s"], "flops_per_step": flops(B),
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
             "--sdpa-backends", ",".join(args.sdpa_backends), "--model", args.model, "--ctx", str(args.ctx)]
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
        shape = ["--model", args.model, "--batch", str(B), "--ctx", str(args.ctx), "--warmup", str(args.warmup),
                 "--steps", str(args.steps), "--device", "cuda", "--precision", "bf16", "--json"]
        for impl, extra in (("handgrad", []), ("handgrad_graphs", ["--cuda-graphs"])):
            out = run_json(f"{impl} B={B}", [args.handgrad, "bench", *shape, *extra], lines=True)
            by_pass = {o.get("pass"): o for o in out} if isinstance(out, list) else {}
            if "step" in by_pass:  # bench's rows: forward, backward, step (mean seconds)
                st = by_pass["step"]
                r = {"train_step": {"mean_s": st["mean_s"], "std_s": st["std_s"]},
                     "tokens_per_s": B * args.ctx / st["mean_s"],
                     "flops_per_step": st["gflop"] * 1e9, "gemm_peak_gflops": st.get("gemm_peak_gflops", st.get("sgemm_peak_gflops")),
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


def print_train(rows, ceiling, args):
    print(f"\n{args.model}, T={args.ctx}, bf16, {ceiling.get('device')}: bf16 matmul ceiling "
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
    impls = ["handgrad", "handgrad_deterministic", "handgrad_deterministic_cudnn"] + [f"sdpa_{b}" for b in backends]
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
                elif i.startswith("handgrad_deterministic"):
                    det = max(det or 0, v or 0) or None
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


def seed_table(args):
    """handgrad bench on the GPU, as the CS336 benchmark's table: a process for each model
    and warm-up count (so warm-up 0 times a cold first call), forward and backward."""
    print(f"\nModel\tPass\tWarmup\tMean (s)\tStd (s)    (handgrad, CUDA bf16, batch {args.batches[0]}, "
          f"context {args.ctx}, {args.steps} timed steps)")
    for model in ("cs336-small", "cs336-medium"):
        for warmup in (0, 1):
            out = run_json(f"handgrad {model} warmup {warmup}",
                           [args.handgrad, "bench", "--model", model, "--batch", str(args.batches[0]), "--ctx",
                            str(args.ctx), "--warmup", str(warmup), "--steps", str(args.steps), "--pass",
                            "forward,backward", "--device", "cuda", "--precision", "bf16", "--json"], lines=True)
            for row in out if isinstance(out, list) else [out]:
                if "error" in row:
                    print(f"{model}\terror: {row['error']}")
                elif row.get("pass") in ("forward", "backward"):
                    print(f"{model}\t{row['pass'].capitalize()}\t{warmup}\t{row['mean_s']:.6f}\t{row['std_s']:.6f}",
                          flush=True)
    return 0


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    if args.seed_table:
        return seed_table(args)
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
        print_train(results["train"], results["ceiling"], args)
    if "attention" in results:
        print_attention(results["attention"], args.sweep_t, args.sweep_hs, args.sdpa_backends)
    return 0


if __name__ == "__main__":
    sys.exit(main())
