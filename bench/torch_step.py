"""Times forward, backward and a training step of GPT-2 or the CS336 Transformer in PyTorch on the CPU,
printing rows in the schema of `handgrad bench --json` (one JSON object per pass).
--precision bf16 runs the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16)
(fp32 parameters and optimizer, bf16 products), the mixed precision a PyTorch user turns on.

Two architectures: GPT-2 (tools/torch_gpt2.py; presets small ... 2.7B, tiny, odd) and the
CS336 "basics" Transformer (tools/torch_cs336.py: RMSNorm, RoPE, SwiGLU, no biases, untied
output; presets cs336-small ... cs336-2.7B, V=10000), as handgrad's presets of the same
names. --arch picks one for an explicit shape with no --model.

One configuration (model, batch, ctx, threads, mode) per process. The vocabulary is padded
to a multiple of 64 (50257 -> 50304, as nanoGPT does; 10000 -> 10048; handgrad pads it
internally too), which makes PyTorch's GEMMs faster; tokens and targets come from the real
vocabulary, and FLOPs count the real vocabulary, as handgrad does (CS336: the untied output
matrix counts, the embedding lookup does not). Attention is F.scaled_dot_product_attention(is_causal=True),
PyTorch's fastest CPU path (torch >= 2.0; the spelled-out softmax before that).

Like handgrad, a model whose training state (16 bytes a parameter) does not fit is not
trained: its forward row runs under torch.no_grad() if the parameters fit, and the other
rows report OOM. Allocation failures under the memory guard also report OOM.
"""
import argparse
import json
import math
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tools"))
import torch_common as tc  # noqa: E402

PRESETS = {  # d_model, d_ff, layers, heads, as hg_config_preset
    "small": (768, 3072, 12, 12),
    "medium": (1024, 4096, 24, 16),
    "large": (1280, 5120, 36, 20),
    "xl": (1600, 6400, 48, 25),
    "2.7B": (2560, 10240, 32, 32),
    "tiny": (64, 256, 2, 4),
    "odd": (96, 384, 2, 3),
    # the CS336 Transformer (tools/torch_cs336.py) on the same ladder
    "cs336-small": (768, 3072, 12, 12),
    "cs336-medium": (1024, 4096, 24, 16),
    "cs336-large": (1280, 5120, 36, 20),
    "cs336-xl": (1600, 6400, 48, 25),
    "cs336-2.7B": (2560, 10240, 32, 32),
}
PRESET_VOCAB = {"tiny": 512, "odd": 1000, **{m: 10000 for m in PRESETS if m.startswith("cs336-")}}
PRESET_TMAX = {"tiny": 64, "odd": 64}
ARCHS = ("gpt2", "cs336")
ARCH_VOCAB = {"gpt2": 50257, "cs336": 10000}  # an explicit shape's default vocabulary
VOCAB = 50257
MAX_SEQ_LEN = 1024
VOCAB_MULTIPLE = 64
PASSES = ("forward", "backward", "step")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(PRESETS), help="preset shape; the flags below override it")
    ap.add_argument("--d-model", type=int)
    ap.add_argument("--d-ff", type=int, help="default 4 * d_model")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--vocab", type=int, help="real vocabulary before padding (default the preset's; explicit "
                    "shapes 50257 for gpt2, 10000 for cs336)")
    ap.add_argument("--arch", choices=ARCHS, help="architecture of an explicit shape (default gpt2); a --model "
                    "preset sets its own (cs336-* are cs336)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--pass", dest="passes", default="forward,backward,step")
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: forward and loss under torch.autocast(\"cpu\", dtype=torch.bfloat16), fp32 parameters")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--checkpoint", action="store_true",
                    help="activation checkpointing: each block under torch.utils.checkpoint (non-reentrant), "
                    "recomputed in backward")
    ap.add_argument("--json", action="store_true", help="JSON lines only")
    args = ap.parse_args()

    shape = dict(zip(("d_model", "d_ff", "layers", "heads"), PRESETS[args.model])) if args.model else {}
    if args.d_model is not None and args.d_ff is None:
        shape.pop("d_ff", None)
    for k in ("d_model", "d_ff", "layers", "heads"):
        if getattr(args, k) is not None:
            shape[k] = getattr(args, k)
    missing = [k for k in ("d_model", "layers", "heads") if k not in shape]
    if missing:
        ap.error("give --model or all of --d-model --layers --heads (missing: %s)" % ", ".join(missing))
    shape.setdefault("d_ff", 4 * shape["d_model"])
    preset_arch = ("cs336" if args.model.startswith("cs336-") else "gpt2") if args.model else None
    if args.arch and preset_arch and args.arch != preset_arch:
        ap.error(f"--arch {args.arch} contradicts --model {args.model} ({preset_arch})")
    args.arch = preset_arch or args.arch or "gpt2"
    args.vocab = args.vocab or PRESET_VOCAB.get(args.model, ARCH_VOCAB[args.arch])
    args.tmax = PRESET_TMAX.get(args.model, MAX_SEQ_LEN)
    overridden = args.model and (tuple(shape[k] for k in ("d_model", "d_ff", "layers", "heads")) != PRESETS[args.model]
                                 or args.vocab != PRESET_VOCAB.get(args.model, VOCAB))
    if args.model and not overridden:
        args.model_name = args.model
    else:
        args.model_name = ("cs336-" if args.arch == "cs336" else "") + "d{d_model}-f{d_ff}-l{layers}-h{heads}".format(**shape)
        if args.vocab != ARCH_VOCAB[args.arch]:
            args.model_name += f"-v{args.vocab}"
    args.shape = shape
    args.passes = [p for p in PASSES if p in args.passes.split(",")]
    if not args.passes:
        ap.error("--pass needs at least one of forward, backward, step")
    if not 1 <= args.ctx <= args.tmax:
        ap.error(f"--ctx must be in [1, {args.tmax}]")
    if args.batch < 1 or args.threads < 1 or args.warmup < 0 or args.steps < 1:
        ap.error("--batch, --threads and --steps must be >= 1, --warmup >= 0")
    return args


def run(args, torch, rows):
    """Fills rows[pass] with timings; raises on failure (the caller reports OOM)."""
    if args.arch == "cs336":
        from torch_cs336 import CS336LM as GPT, CS336Config as GPTConfig, param_count, param_groups, train_flops
    else:
        from torch_gpt2 import GPT, GPTConfig, param_count, param_groups, train_flops

    s = args.shape
    padded = math.ceil(args.vocab / VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    cfg = GPTConfig(vocab_size=padded, max_seq_len=args.tmax, n_layer=s["layers"], n_head=s["heads"],
                    d_model=s["d_model"], d_ff=s["d_ff"])
    real = GPTConfig(**{**cfg.to_dict(), "vocab_size": args.vocab})
    n = param_count(cfg)
    B, T = args.batch, args.ctx
    flop = train_flops(real, B, T) / 1e9
    for p in args.passes:
        rows[p].update(params=param_count(real, False), gflop=flop / 3 if p == "forward" else
                       2 * flop / 3 if p == "backward" else flop)

    room = tc.guard_memory()
    # parameters, grads and AdamW's two moments: 16 bytes a parameter; parameters alone: 4
    training = any(p in args.passes for p in ("backward", "step")) and 16 * n <= room
    if not training and 4 * n > room:
        raise MemoryError(f"parameters need {tc.gib(4 * n):.1f} GiB, have {tc.gib(room):.1f} GiB")
    for p in args.passes:
        rows[p]["training"] = training if p == "forward" else True
        if p != "forward" and not training:
            rows[p].update(oom=True, note=f"OOM: training state needs {tc.gib(16 * n):.1f} GiB, "
                           f"have {tc.gib(room):.1f} GiB")

    torch.manual_seed(args.seed)
    sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    model = GPT(cfg, attn_impl="sdpa" if sdpa else "math")
    tokens = torch.randint(0, args.vocab, (B, T))
    targets = torch.randint(0, args.vocab, (B, T))
    if args.checkpoint:  # the peer of handgrad's --recompute block
        from torch.utils.checkpoint import checkpoint
        for block in (model.h if hasattr(model, "h") else model.layers):
            block.forward = (lambda f: lambda *a: checkpoint(f, *a, use_reentrant=False))(block.forward)
    compiled = torch.compile(model) if args.mode == "compile" else model

    def fwd(x, y):  # mixed precision as a PyTorch user turns it on: autocast around the forward
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            return compiled(x, y)

    def forward():
        fwd(tokens, targets)

    if not training:
        model.requires_grad_(False)
        with torch.no_grad():
            rows["forward"]["mean_s"], rows["forward"]["std_s"] = tc.timed(forward, args.warmup, args.steps)
        return

    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=3e-4, betas=(0.9, 0.95), eps=1e-8)

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

    f = tc.timed(forward, args.warmup, args.steps)
    if "forward" in rows:
        rows["forward"]["mean_s"], rows["forward"]["std_s"] = f
    if "backward" in rows:
        fb = tc.timed(forward_backward, args.warmup, args.steps)
        rows["backward"].update(mean_s=fb[0] - f[0], std_s=math.hypot(fb[1], f[1]),
                                forward_backward_mean_s=fb[0], forward_backward_std_s=fb[1])
    if "step" in rows:
        rows["step"]["mean_s"], rows["step"]["std_s"] = tc.timed(train_step, args.warmup, args.steps)


def main():
    args = parse_args()
    tc.set_threads(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    if args.mode == "compile" and not hasattr(torch, "compile"):
        print(f"torch {torch.__version__} has no torch.compile", file=sys.stderr)
        return 2

    rows = {p: {"kind": "model", "impl": f"torch-{args.mode}" + ("-checkpoint" if args.checkpoint else ""),
                "torch_version": torch.__version__,
                "model": args.model_name, "batch": args.batch, "ctx": args.ctx, "threads": args.threads,
                "pass": p, "warmup": args.warmup, "steps": args.steps, "precision": args.precision, "oom": False,
                "note": ""}
            for p in args.passes}
    status = 0
    try:
        run(args, torch, rows)
    except Exception as e:  # noqa: BLE001 - compile needs a C++ toolchain; report rather than crash
        if tc.is_oom(e):
            for r in rows.values():
                if "mean_s" not in r:
                    r.update(oom=True, note=r["note"] or f"OOM: {str(e).strip().splitlines()[0]}"[:160])
        else:
            traceback.print_exc()
            for r in rows.values():
                r["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]
            status = 1
    rss = tc.peak_rss_bytes()
    for r in rows.values():
        r["peak_rss_bytes"] = rss
        if "mean_s" in r and r["mean_s"] > 0:
            r["tokens_per_s"] = args.batch * args.ctx / r["mean_s"]
            r["gflops"] = r["gflop"] / r["mean_s"]
    for p in args.passes:
        r = rows[p]
        if args.json:
            print(json.dumps(r))
        else:
            t = f"{r['mean_s']:.4f} s +- {r['std_s']:.4f}" if "mean_s" in r else r.get("error", r["note"])
            print(f"{r['impl']} {r['model']} B={args.batch} T={args.ctx} {args.threads} threads {p:<9} {t}, "
                  f"peak RSS {rss / 2**20:.0f} MiB (torch {torch.__version__})")
    return status


if __name__ == "__main__":
    sys.exit(main())
