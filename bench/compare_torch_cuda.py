#!/usr/bin/env python3
"""handgrad against PyTorch on the GPU machine, in interleaved rounds, one method on both sides.

Part "train": models at T=1024 (--configs MODEL:B,...; default GPT-2 small at B=8, 16 and
32 and cs336-small at B=16) in bf16. handgrad (`handgrad bench --device cuda --precision
bf16 --pass step`, a process per run; with and without CUDA graphs, and at --variants-at
the A/B variants: the bias gradients as column sums, HANDGRAD_CUDA_BGRAD=off, and the
GEMM candidates timed, HANDGRAD_CUDA_GEMM_TUNE=1) against torch.compile (and, at
--eager-at, eager): fp32 master weights, bf16 autocast, fused AdamW, clip_grad_norm_.
--model picks the PyTorch model of a preset: tools/torch_gpt2.py (SDPA's flash backend),
tools/torch_cs336.py (likewise) or SmolLM-135M's shape (transformers' LlamaForCausalLM).

Part "cpu": handgrad `--precision bf16` against PyTorch's bf16 autocast, eager and
torch.compile, on the host CPU (--configs, default GPT-2 small and cs336-small at B=4, T
given by --ctx, default 256), at each of --threads. Each thread count runs on the last
cores of this process's affinity (2 threads: the last two), handgrad and PyTorch alike.

The method (both parts):
  * each PyTorch configuration is one long-lived worker process, built, compiled and
    warmed up once before the rounds (in parallel), which then times on request; each
    handgrad run is a fresh process;
  * --rounds rounds (default 3); in each, every configuration's implementations run one
    after another, the order reversed every other round, so slow drift reaches all;
  * a run's time is the median of its timed steps (--steps, after --warmup), each step
    synchronised (CUDA) and timed by the host clock, on both sides;
  * a ratio is taken within a round (torch.compile's time / the implementation's), and
    the reported ratio is the median of the per-round ratios; every round's figures are
    printed and kept in results_PART.json;
  * GPU memory: the most device memory NVML reported for the process (sampled every
    20 ms while it ran), the same for handgrad and PyTorch; CPU memory: peak RSS.

Part "attention": handgrad's attention (bench/attention_cuda: as the library picks, and
its own kernels under --deterministic) against F.scaled_dot_product_attention's flash,
efficient, cudnn and math backends, causal, bf16, T from 512 to 16384, head sizes 64 and
128, d_model 2048, B*T = 16384 tokens. Both sides: the median of 15 batches of 4
back-to-back calls after 3 untimed ones, synchronised around each batch; memory: the
device memory the shape took (cudaMemGetInfo's free before the inputs less free after
the timed calls).

--prewarm: builds and compiles the PyTorch workers of --part train or cpu, one warm-up
step each, and exits, filling the compile caches (TORCHINDUCTOR_CACHE_DIR) for a later
call on the same machine.

--seed-table: the CS336 benchmark's table (Model, Pass, Warmup, Mean, Std) of handgrad on
the GPU for cs336-small and cs336-medium.

Usage: bench/compare_torch_cuda.py --part train|cpu|attention [--out DIR] [options]
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# --model: handgrad's preset and PyTorch's model of the same shape (vocabulary padded to 64
# on PyTorch's side, as its GPT-2 runs always were)
TRAIN_MODELS = {
    "small": ("gpt2", dict(vocab=50257, n_layer=12, n_head=12, n_kv_head=12, d_model=768, d_ff=3072)),
    "cs336-small": ("cs336", dict(vocab=10000, n_layer=12, n_head=12, n_kv_head=12, d_model=768, d_ff=3072)),
    "cs336-medium": ("cs336", dict(vocab=10000, n_layer=24, n_head=16, n_kv_head=16, d_model=1024, d_ff=4096)),
    "smollm-135m": ("llama", dict(vocab=49152, n_layer=30, n_head=9, n_kv_head=3, d_model=576, d_ff=1536)),
}
DEFAULTS = {  # part: (configs, ctx, warmup, steps)
    "train": ("small:8,small:16,small:32,cs336-small:16", 1024, 3, 10),
    "cpu": ("small:4,cs336-small:4", 256, 1, 3),
}
SWEEP_T = (512, 1024, 2048, 4096, 8192, 16384)
SWEEP_HS = (64, 128)
SDPA_BACKENDS = ("flash", "efficient", "cudnn", "math")
ATTN_WARM, ATTN_BATCHES, ATTN_CALLS = 3, 15, 4  # as bench/attention_cuda.c
# handgrad's A/B variants: name -> (extra flags, extra environment)
HG_IMPLS = {
    "handgrad": ([], {}),
    "handgrad_graphs": (["--cuda-graphs"], {}),
    "handgrad_colsums": ([], {"HANDGRAD_CUDA_BGRAD": "off"}),
    "handgrad_tuned": ([], {"HANDGRAD_CUDA_GEMM_TUNE": "1"}),
}
# Dense bf16 tensor-core peaks from NVIDIA's datasheets (the sparse figures are twice these).
DATASHEET_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("H200", 989.4), ("H800", 989.4))


def int_list(v):
    return [int(x) for x in v.split(",")]


def parse_configs(v):
    out = []
    for item in v.split(","):
        model, _, b = item.partition(":")
        if model not in TRAIN_MODELS or not b.isdigit() or int(b) < 1:
            raise argparse.ArgumentTypeError(f"'{item}' is not MODEL:BATCH with MODEL one of {sorted(TRAIN_MODELS)}")
        out.append((model, int(b)))
    return out


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("train", "cpu", "attention"), default="train")
    ap.add_argument("--handgrad", default=os.path.join(ROOT, "build", "handgrad"))
    ap.add_argument("--attention-bin", default=os.path.join(ROOT, "build", "bench", "attention_cuda"))
    ap.add_argument("--out", help="directory for results_PART.json")
    ap.add_argument("--configs", type=parse_configs, help="MODEL:BATCH,... (train: small:8,small:16,small:32,"
                    "cs336-small:16; cpu: small:4,cs336-small:4)")
    ap.add_argument("--eager-at", type=parse_configs, default=None,
                    help="configurations also timed with PyTorch eager (default: train small:8,cs336-small:16; cpu all)")
    ap.add_argument("--variants-at", type=parse_configs, default=None,
                    help="train configurations that also run handgrad's A/B variants (default small:8)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=None, help="context (train 1024, cpu 256, seed table 256)")
    ap.add_argument("--threads", type=int_list, default=[2, 16], help="thread counts of --part cpu")
    ap.add_argument("--prewarm", action="store_true", help="compile and warm the PyTorch workers, then exit")
    ap.add_argument("--ready-timeout", type=float, default=600, help="seconds a worker may take to compile and warm")
    ap.add_argument("--seed-table", action="store_true", help="print the CS336 benchmark table of handgrad on the GPU")
    ap.add_argument("--batches", type=int_list, default=[4], help="batch of --seed-table")
    ap.add_argument("--sweep-t", type=int_list, default=list(SWEEP_T), help="sequence lengths of --part attention")
    ap.add_argument("--sweep-hs", type=int_list, default=list(SWEEP_HS), help="head sizes of --part attention")
    ap.add_argument("--sdpa-backends", type=lambda v: v.split(","), default=list(SDPA_BACKENDS),
                    help="SDPA backends of --part attention (default flash,efficient,cudnn,math)")
    # a worker's own arguments
    ap.add_argument("--worker", choices=("serve", "attention", "ceiling"), help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager", help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=sorted(TRAIN_MODELS), default="small", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--nthreads", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    part = "cpu" if args.part == "cpu" else "train"
    configs, ctx, warmup, steps = DEFAULTS[part]
    args.configs = args.configs or parse_configs(configs)
    args.ctx = args.ctx or (256 if args.seed_table else ctx)
    args.warmup = warmup if args.warmup is None else args.warmup
    args.steps = args.steps or steps
    if args.eager_at is None:
        args.eager_at = list(args.configs) if args.part == "cpu" else parse_configs("small:8,cs336-small:16")
    if args.variants_at is None:
        args.variants_at = parse_configs("small:8") if args.part == "train" else []
    return args


# ---------------------------------------------------------------- workers (one process each)

def step_times(torch, fn, warmup, steps, cuda):
    """Seconds of each of `steps` calls of fn after `warmup`, host clock, synchronised."""
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def summary(times):
    return {"median_s": statistics.median(times), "mean_s": statistics.fmean(times),
            "std_s": statistics.stdev(times) if len(times) > 1 else 0.0, "times_s": times}


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


def train_model(torch, name, T, cuda):
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
        # the CPU: SDPA's own choice (its flash backend is a CUDA one)
        return (model, param_groups(model, 0.1), lambda B: train_flops(real, B, T),
                [SDPBackend.FLASH_ATTENTION] if cuda else None)
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


def worker_serve(args):
    """One PyTorch configuration: builds, compiles and warms it (printing {"ready": ...}),
    then answers each "time" line on stdin with a JSON line of its step times; ends at
    "quit" or end of input. With --prewarm it ends after the warm-up."""
    cuda = args.device == "cuda"
    if not cuda:  # before torch loads: its OpenMP reads these
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.nthreads)
    import torch
    from torch.nn.attention import sdpa_kernel
    if not cuda:
        torch.set_num_threads(args.nthreads)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model, groups, flops, backends = train_model(torch, args.model, args.ctx, cuda)
    dev = "cuda" if cuda else "cpu"
    model = model.to(dev)
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    # one static graph per worker: no dynamic-shape recompilation
    fwd = torch.compile(model, dynamic=False) if args.mode == "compile" else model
    B, T, V = args.batch, args.ctx, TRAIN_MODELS[args.model][1]["vocab"]
    tokens = torch.randint(0, V, (B, T), device=dev)
    targets = torch.randint(0, V, (B, T), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=torch.bfloat16), (sdpa_kernel(backends) if backends else
                                                         contextlib.nullcontext()):
            loss = fwd(tokens, targets)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step_times(torch, step, max(args.warmup, 1), 1, cuda)  # the compile and a warm step
    ready = {"ready": True, "prepare_s": time.perf_counter() - t0, "flops_per_step": flops(B),
             "torch_version": torch.__version__}
    print(json.dumps(ready), flush=True)
    if args.prewarm:
        return 0
    for line in sys.stdin:
        if line.strip() != "time":
            break
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        r = summary(step_times(torch, step, args.warmup, args.steps, cuda))
        if cuda:
            r["torch_max_allocated_bytes"] = torch.cuda.max_memory_allocated()
        else:
            import resource
            r["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(json.dumps(r), flush=True)
    return 0


def attention_flops(B, NH, T, hs):
    return 4.0 * B * NH * T * T * hs * 0.5  # causal


def worker_attention(torch, args):
    """SDPA's backends over the sweep, timed and measured as bench/attention_cuda.c does."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kinds = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}

    def batched(fn):  # median over ATTN_BATCHES batches of the mean seconds per call
        for _ in range(ATTN_WARM):
            fn()
        torch.cuda.synchronize()
        t = []
        for _ in range(ATTN_BATCHES):
            t0 = time.perf_counter()
            for _ in range(ATTN_CALLS):
                fn()
            torch.cuda.synchronize()
            t.append((time.perf_counter() - t0) / ATTN_CALLS)
        return statistics.median(t)

    for hs in args.sweep_hs:
        for T in args.sweep_t:
            NH, B = 2048 // hs, max(1, 16384 // T)
            flops = attention_flops(B, NH, T, hs)
            for name in args.sdpa_backends:
                row = {"impl": f"sdpa_{name}", "T": T, "hs": hs, "B": B, "NH": NH, "causal": 1}
                qkv = dout = None
                try:
                    torch.cuda.empty_cache()
                    torch.cuda.synchronize()
                    free0 = torch.cuda.mem_get_info()[0]
                    # q, k, v as views of one (B, T, 3, NH, hs) tensor: the layout handgrad reads in place
                    qkv = (torch.rand(B, T, 3, NH, hs, device="cuda", dtype=torch.bfloat16) * 2 - 1).requires_grad_()
                    dout = torch.rand(B, NH, T, hs, device="cuda", dtype=torch.bfloat16) * 2 - 1
                    with sdpa_kernel(kinds[name]):
                        def fwd():
                            q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

                        def fb():
                            qkv.grad = None
                            fwd().backward(dout)

                        with torch.no_grad():
                            tf = batched(fwd)
                        tfb = batched(fb)
                    free1 = torch.cuda.mem_get_info()[0]
                    row.update(forward_ms=tf * 1e3, forward_backward_ms=tfb * 1e3, forward_tflops=flops / tf / 1e12,
                               forward_backward_tflops=3.5 * flops / tfb / 1e12, device_bytes=max(free0 - free1, 0))
                except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # a backend may refuse a shape or run out
                    row["error"] = str(e).strip().splitlines()[0][:160]
                del qkv, dout
                print(json.dumps(row), flush=True)  # one JSON line a row


def worker(args):
    if args.worker == "serve":
        return worker_serve(args)
    import torch
    if not torch.cuda.is_available():
        print(json.dumps({"error": "PyTorch sees no CUDA device"}))
        return 1
    try:
        if args.worker == "ceiling":
            print(json.dumps(worker_ceiling(torch)))
        else:
            worker_attention(torch, args)  # prints its rows as it goes
    except Exception as e:  # report, so the table shows what failed
        print(json.dumps({"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"}))
    return 0


# ---------------------------------------------------------------- measuring processes

class GpuMemory:
    """The most device memory NVML reports for each watched process, sampled every 20 ms."""

    def __init__(self):
        self.peak, self.watch, self.error = {}, set(), None
        self.lock = threading.Lock()
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml, self.dev = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as e:  # no NVML: memory is reported as n/a
            self.nvml, self.error = None, f"NVML: {type(e).__name__}: {e}"
            return
        threading.Thread(target=self.loop, daemon=True).start()

    def loop(self):
        while True:
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.dev)
            except Exception as e:
                self.error = f"NVML: {type(e).__name__}: {e}"
                return
            with self.lock:
                for p in procs:
                    if p.pid in self.watch and p.usedGpuMemory is not None:
                        self.peak[p.pid] = max(self.peak.get(p.pid, 0), p.usedGpuMemory)
            time.sleep(0.02)

    def add(self, pid):
        with self.lock:
            self.watch.add(pid)

    def bytes(self, pid):
        with self.lock:
            return self.peak.get(pid)


def pin_to(cpus):
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


def json_lines(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def run_json(label, cmd, lines=False, env=None, cpus=None, gpu=None):
    """Runs cmd; returns its last JSON line (or every JSON line), or {"error": ...};
    with gpu, the last line gets the process's peak device memory as "device_bytes"."""
    print(f"compare_torch_cuda: {label}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})), preexec_fn=pin_to(cpus))
    if gpu:
        gpu.add(p.pid)
    out, err = p.communicate()
    objs = json_lines(out)
    if not objs:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit status {p.returncode}: {tail}"}
    if gpu:
        objs[-1]["device_bytes"] = gpu.bytes(p.pid)
    return objs if lines else objs[-1]


class Worker:
    """A long-lived PyTorch configuration (worker_serve)."""

    def __init__(self, args, impl, model, batch, cpus, threads, gpu):
        self.impl, self.model, self.batch = impl, model, batch
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "serve", "--mode", impl.split("_")[1],
               "--model", model, "--batch", str(batch), "--ctx", str(args.ctx), "--warmup", str(args.warmup),
               "--steps", str(args.steps), "--device", "cpu" if args.part == "cpu" else "cuda",
               "--nthreads", str(threads)] + (["--prewarm"] if args.prewarm else [])
        print(f"compare_torch_cuda: start {impl} {model} B={batch}: {' '.join(cmd)}", file=sys.stderr, flush=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if args.part == "cpu" and "TORCHINDUCTOR_CACHE_DIR" in env:  # code compiled for N threads: a cache each
            env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(env["TORCHINDUCTOR_CACHE_DIR"], f"cpu-{threads}")
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                  preexec_fn=pin_to(cpus))
        if gpu:
            gpu.add(self.p.pid)
        self.ready, self.error = None, None

    def read(self, timeout):
        """The next JSON line, or None (an error recorded) at end of output or timeout."""
        box = []
        t = threading.Thread(target=lambda: box.append(self.p.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        line = box[0] if box else None
        if not line:
            self.error = "timed out" if t.is_alive() else f"exited ({self.p.poll()})"
            return None
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            self.error = f"not JSON: {line.strip()[:120]}"
            return None

    def wait_ready(self, timeout):
        self.ready = self.read(timeout)
        return self.ready is not None

    def time(self, timeout=300):
        if self.error:
            return {"error": self.error}
        try:
            self.p.stdin.write("time\n")
            self.p.stdin.flush()
        except OSError as e:
            self.error = f"worker gone: {e}"
            return {"error": self.error}
        r = self.read(timeout)
        return r if r is not None else {"error": self.error}

    def close(self):
        with contextlib.suppress(OSError):
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def me(args, *extra):
    return [sys.executable, os.path.abspath(__file__), *extra, "--sweep-t", ",".join(map(str, args.sweep_t)),
            "--sweep-hs", ",".join(map(str, args.sweep_hs)), "--sdpa-backends", ",".join(args.sdpa_backends)]


def handgrad_cmd(args, model, batch, threads):
    cmd = [args.handgrad, "bench", "--model", model, "--batch", str(batch), "--ctx", str(args.ctx), "--warmup",
           str(args.warmup), "--steps", str(args.steps), "--precision", "bf16", "--pass", "step", "--json"]
    return cmd + (["--threads", str(threads)] if args.part == "cpu" else ["--device", "cuda"])


def handgrad_run(args, impl, model, batch, cpus, threads, gpu):
    flags, env = HG_IMPLS[impl]
    out = run_json(f"{impl} {model} B={batch}", handgrad_cmd(args, model, batch, threads) + flags, lines=True, env=env,
                   cpus=cpus, gpu=gpu)
    if isinstance(out, dict):
        return out
    dev_bytes = out[-1].get("device_bytes")
    out = next((o for o in out if o.get("pass") == "step"), None)
    if out is None:
        return {"error": "no step row in handgrad bench's output"}
    t = out.get("median_s") if isinstance(out.get("median_s"), (int, float)) else None
    if t is None:
        return {"error": "no median_s in handgrad bench's step row"}
    r = {"median_s": t, "mean_s": out.get("mean_s"), "std_s": out.get("std_s"),
         "flops_per_step": out["gflop"] * 1e9, "gemm_peak_gflops": out.get("gemm_peak_gflops")}
    if gpu:
        r["device_bytes"] = dev_bytes
    else:
        r["peak_rss_bytes"] = out.get("peak_rss_bytes")
    return r


# ---------------------------------------------------------------- the rounds

def rounds(args, threads=0, cpus=None, gpu=None):
    """Rows {impl, model, batch, threads, rounds: [result per round], ...}, printed as each
    run completes, so a run cut short keeps what it measured."""
    cfgs = []
    for model, batch in args.configs:
        torch_impls = ["torch_compile"] + (["torch_eager"] if (model, batch) in args.eager_at else [])
        hg = ["handgrad"] + ([] if args.part == "cpu" else
                             ["handgrad_graphs"] + (["handgrad_colsums", "handgrad_tuned"]
                                                    if (model, batch) in args.variants_at else []))
        cfgs.append((model, batch, hg, torch_impls))
    workers = {}
    for model, batch, _, torch_impls in cfgs:  # all compile at once
        for impl in torch_impls:
            workers[(impl, model, batch)] = Worker(args, impl, model, batch, cpus, threads, gpu)
    t0 = time.perf_counter()
    for (impl, model, batch), w in workers.items():
        left = max(args.ready_timeout - (time.perf_counter() - t0), 1)
        ok = w.wait_ready(left)
        print("ready: " + json.dumps({"impl": impl, "model": model, "batch": batch, "threads": threads,
                                      **(w.ready if ok else {"error": w.error})}), flush=True)
    if args.prewarm:
        for w in workers.values():
            w.close()
        return []
    rows = {}
    for r in range(args.rounds):
        for i in range(len(cfgs)):
            model, batch, hg, torch_impls = cfgs[(i + r) % len(cfgs)]
            impls = hg + torch_impls
            for impl in impls if r % 2 == 0 else impls[::-1]:
                if impl.startswith("handgrad"):
                    res = handgrad_run(args, impl, model, batch, cpus, threads, gpu)
                else:
                    w = workers[(impl, model, batch)]
                    res = w.time()
                    if gpu and "error" not in res:
                        res["device_bytes"] = gpu.bytes(w.p.pid)
                    if "error" not in res:
                        res["flops_per_step"] = w.ready["flops_per_step"]
                row = rows.setdefault((impl, model, batch), {"impl": impl, "model": model, "batch": batch,
                                                             "threads": threads, "rounds": []})
                row["rounds"].append(res)
                print("run: " + json.dumps({"round": r + 1, "impl": impl, "model": model, "batch": batch,
                                            "threads": threads, **{k: v for k, v in res.items() if k != "times_s"}}),
                      flush=True)
    for w in workers.values():
        w.close()
    return list(rows.values())


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "n/a"


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def tabulate(rows, ceiling, args):
    """Per configuration: each implementation's per-round medians, their median, and its
    ratio to torch.compile's time taken round by round (the median of the rounds' ratios)."""
    peak = (ceiling or {}).get("bf16_matmul_tflops")
    keys = []
    for r in rows:
        if (r["model"], r["batch"], r["threads"]) not in keys:
            keys.append((r["model"], r["batch"], r["threads"]))
    mem = "device MiB" if args.part == "train" else "RSS MiB"
    for model, batch, threads in keys:
        group = [r for r in rows if (r["model"], r["batch"], r["threads"]) == (model, batch, threads)]
        comp = next((r for r in group if r["impl"] == "torch_compile"), None)
        where = f"{threads} threads" if args.part == "cpu" else f"T={args.ctx}"
        print(f"\n{model}, B={batch}, {where}, bf16: ms per step in each round, the median of the rounds, "
              f"and torch.compile's time over the implementation's, round by round")
        print(f"{'impl':<18} {'rounds (ms)':<26} {'median':>8} {'tokens/s':>10} {'MFU':>6} {mem:>11}   "
              f"{'vs compile, by round':<22} {'median':>6}")
        for r in group:
            per = [x.get("median_s") for x in r["rounds"]]
            ms = [fmt(t * 1e3 if t else None, ".1f") for t in per]
            m = med(per)
            r["median_of_rounds_s"] = m
            ratios = []
            if comp:
                for a, b in zip(comp["rounds"], r["rounds"]):
                    ta, tb = a.get("median_s"), b.get("median_s")
                    ratios.append(ta / tb if ta and tb else None)
            r["vs_compile_by_round"] = ratios
            r["vs_compile"] = med(ratios)
            flops = next((x.get("flops_per_step") for x in r["rounds"] if x.get("flops_per_step")), None)
            mfu = flops / m / (peak * 1e12) if m and flops and peak and args.part == "train" else None
            byte_key = "device_bytes" if args.part == "train" else "peak_rss_bytes"
            b = max((x.get(byte_key) or 0 for x in r["rounds"]), default=0)
            err = next((x["error"] for x in r["rounds"] if "error" in x), None)
            print(f"{r['impl']:<18} {' '.join(ms):<26} {fmt(m * 1e3 if m else None, '.1f'):>8} "
                  f"{fmt(batch * args.ctx / m if m else None, '.0f'):>10} {fmt(mfu, '.1%'):>6} "
                  f"{fmt(b / 2**20 if b else None, '.0f'):>11}   {' '.join(fmt(x, '.3f') for x in ratios):<22} "
                  f"{fmt(r['vs_compile'], '.3f'):>6}" + (f"  error: {err}" if err else ""))


def print_attention(rows, args):
    impls = ["handgrad", "handgrad_deterministic", "handgrad_deterministic_cudnn"] + \
        [f"sdpa_{b}" for b in args.sdpa_backends]
    for r in rows:
        if "error" in r and "T" not in r:
            print(f"{r['impl']}: error: {r['error']}")
    print("\nAttention, causal, bf16, d_model 2048, B*T=16384: forward+backward TFLOP/s (device MiB)")
    print(f"{'hs':>4} {'T':>6} " + "".join(f"{i:>24}" for i in impls) + f"{'hg/best':>9}{'det/flash':>10}")
    for hs in args.sweep_hs:
        for T in args.sweep_t:
            cells, best, hg, det, flash = [], None, None, None, None
            for i in impls:
                r = next((r for r in rows if r.get("impl") == i and r.get("T") == T and r.get("hs") == hs), {})
                v = r.get("forward_backward_tflops")
                mib = r["device_bytes"] / 2**20 if isinstance(r.get("device_bytes"), int) else None
                cells.append(f"{fmt(v, '.0f')} ({fmt(mib, '.0f')})" if v else ("error" if "error" in r else "n/a"))
                if i == "handgrad":
                    hg = v
                elif i == "handgrad_deterministic":
                    det = v
                elif i.startswith("sdpa_") and v and (best is None or v > best):
                    best = v
                if i == "sdpa_flash":
                    flash = v
            print(f"{hs:>4} {T:>6} " + "".join(f"{c:>24}" for c in cells) +
                  f"{fmt(hg / best if hg and best else None, '.2f'):>9}"
                  f"{fmt(det / flash if det and flash else None, '.2f'):>10}")
    for k in sorted({r.get("kernels") for r in rows if r.get("impl") == "handgrad" and r.get("kernels")}):
        print(f"handgrad's kernels: {k}")


def seed_table(args):
    """handgrad bench on the GPU, as the CS336 benchmark's table: a process for each model
    and warm-up count (so warm-up 0 times a cold first call), forward and backward."""
    steps = args.steps
    print(f"\nModel\tPass\tWarmup\tMean (s)\tStd (s)    (handgrad, CUDA bf16, batch {args.batches[0]}, "
          f"context {args.ctx}, {steps} timed steps)")
    for model in ("cs336-small", "cs336-medium"):
        for warmup in (0, 1):
            out = run_json(f"handgrad {model} warmup {warmup}",
                           [args.handgrad, "bench", "--model", model, "--batch", str(args.batches[0]), "--ctx",
                            str(args.ctx), "--warmup", str(warmup), "--steps", str(steps), "--pass",
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
    results = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "argv": sys.argv[1:]}
    if args.part == "train":
        gpu = GpuMemory()
        results["ceiling"] = {} if args.prewarm else run_json("bf16 matmul ceiling", me(args, "--worker", "ceiling"))
        results["train"] = rounds(args, gpu=gpu)
        results["nvml_error"] = gpu.error
        if gpu.error:
            print(f"device memory: n/a ({gpu.error})")
    elif args.part == "cpu":
        results["cpu"] = []
        mine = sorted(os.sched_getaffinity(0))
        for threads in args.threads:
            # pinned to the last cores; prewarm's compiles use them all
            cpus = set(mine[-threads:]) if threads < len(mine) and not args.prewarm else None
            results["cpu"] += rounds(args, threads=threads, cpus=cpus)
    else:
        hg = run_json("handgrad attention sweep", [args.attention_bin, "--T", ",".join(map(str, args.sweep_t)), "--hs",
                                                    ",".join(map(str, args.sweep_hs))], lines=True)
        sdpa = run_json("torch SDPA sweep", me(args, "--worker", "attention"), lines=True)
        results["attention"] = [{"impl": impl, **r} for impl, out in (("handgrad", hg), ("sdpa", sdpa))
                                for r in (out if isinstance(out, list) else [out])]
    if args.prewarm:
        return 0
    if args.part in ("train", "cpu"):
        tabulate(results[args.part], results.get("ceiling"), args)
    else:
        print_attention(results["attention"], args)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"results_{args.part}.json"), "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
