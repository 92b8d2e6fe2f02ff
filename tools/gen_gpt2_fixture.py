"""Writes the GPT-2 safetensors fixtures in tests/fixtures/ that the C tests compare against.

Parameters and batches are drawn in float32 from fixed seeds; the reference forward,
backward and a 10-step AdamW trajectory are computed in float64 from those exact values.
Attention in the reference is the explicit masked softmax (attn_impl="math").
Usage: python3 tools/gen_gpt2_fixture.py [--out-dir tests/fixtures] [--only odd|tiny]

Contents of each file (little-endian, row-major):
  tokens, targets        I32 (B, T); a target of -1 is ignored
  param.<hf name>        F32, the initial parameters, HF names and Conv1D (in, out) layouts
  logits                 F64 (B, T, V);  loss F64 (1,), the mean over non-ignored targets
  grad.<hf name>         F64, gradient of that mean loss
  adamw.losses           F64 (10,), loss before update k;  adamw.grad_norms F64 (10,), pre-clip
  final.<hf name>        F64, parameters after the 10 updates
  __metadata__ (strings) config, adamw (JSON), batch, seq_len, generator, torch_version
The updates are torch.nn.utils.clip_grad_norm_ (grads *= min(1, clip / (norm + 1e-6)))
then torch.optim.AdamW(foreach=False), with decay on the tensors of dim >= 2 only.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import GPT, GPTConfig, param_groups  # noqa: E402

FIXTURES = {
    "odd": dict(cfg=GPTConfig(vocab_size=1000, max_seq_len=64, n_layer=2, n_head=3, d_model=96, d_ff=384),
                batch=3, seq_len=37, seed=1001),
    "tiny": dict(cfg=GPTConfig(vocab_size=512, max_seq_len=64, n_layer=2, n_head=4, d_model=64, d_ff=256),
                 batch=2, seq_len=64, seed=1002),
}
ADAMW = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
ADAMW_STEPS = 10
IGNORE_FRACTION = 0.1


def draw_params(model, rng):
    """Non-trivial float32 values: N(0, 0.02) weights and biases, 1 + N(0, 0.1) LN weights."""
    params = {}
    for name, p in model.named_parameters():
        z = rng.standard_normal(tuple(p.shape), dtype=np.float32)
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            v = np.float32(1) + np.float32(0.1) * z
        else:
            v = np.float32(0.02) * z
        params[name] = torch.from_numpy(v)
    return params


def draw_batch(V, B, T, rng):
    """Tokens and targets uniform in [0, V); 10% of the targets (at least one) are -1,
    at distinct random positions, never a whole row."""
    tokens = rng.integers(0, V, size=(B, T), dtype=np.int32)
    targets = rng.integers(0, V, size=(B, T), dtype=np.int32)
    n_ignore = max(1, round(IGNORE_FRACTION * B * T))
    targets.reshape(-1)[rng.choice(B * T, size=n_ignore, replace=False)] = -1
    assert not (targets == -1).all(axis=1).any(), "a row has every target ignored"
    return torch.from_numpy(tokens), torch.from_numpy(targets)


SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32"}


def write_safetensors(path, tensors, metadata):
    """A safetensors file with sorted keys, so reruns write identical bytes (the Rust
    writer orders metadata by hash). Tensors are laid out in name order."""
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    blob = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data section starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for c in chunks:
            f.write(c)


def build(cfg, params, dtype):
    model = GPT(cfg, attn_impl="math").to(dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in params.items()}, strict=True)
    return model


def adamw_trajectory(cfg, params, tokens, targets, grad_clip):
    """Losses before each update, pre-clip grad norms, and the final float64 parameters."""
    model = build(cfg, params, torch.float64)
    opt = torch.optim.AdamW(param_groups(model, ADAMW["weight_decay"]), lr=ADAMW["lr"],
                            betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"], foreach=False)
    losses, norms = [], []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = model(tokens, targets)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip).item())
        losses.append(loss.item())
        opt.step()
    final = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return np.array(losses), np.array(norms), final


def pick_grad_clip(norms):
    """The median unclipped norm rounded to 4 significant bits, so the value is exact in
    float32 and short in decimal."""
    m = float(np.median(norms))
    quantum = 2.0 ** (math.floor(math.log2(m)) - 3)
    return round(m / quantum) * quantum


def generate(name, spec, out_dir):
    cfg, B, T = spec["cfg"], spec["batch"], spec["seq_len"]
    rng = np.random.default_rng(spec["seed"])
    params = draw_params(GPT(cfg), rng)
    tokens, targets = draw_batch(cfg.vocab_size, B, T, rng)

    model = build(cfg, params, torch.float64)
    logits, loss = model(tokens, targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    assert math.isfinite(loss.item()), f"{name}: loss is not finite"

    # Self-check: float32 agrees with the float64 reference.
    model32 = build(cfg, params, torch.float32)
    logits32, loss32 = model32(tokens, targets)
    loss32.backward()
    rel_loss = abs(loss32.item() - loss.item()) / abs(loss.item())
    rel_logits = ((logits32.double() - logits).abs().max() / logits.abs().max()).item()
    rel_grad = max(((p.grad.double() - grads[n]).norm() / grads[n].norm()).item()
                   for n, p in model32.named_parameters())
    print(f"{name}: loss f64 {loss.item():.12f} f32 {loss32.item():.12f} rel {rel_loss:.2e}; "
          f"logits max rel {rel_logits:.2e}; worst grad rel-norm err {rel_grad:.2e}")
    assert rel_loss < 1e-5, f"{name}: float32 loss disagrees with float64 by {rel_loss:.2e}"

    # Choose the clip from an unclipped run, then check that it clips some steps, not all.
    _, free_norms, _ = adamw_trajectory(cfg, params, tokens, targets, math.inf)
    grad_clip = pick_grad_clip(free_norms)
    losses, norms, final = adamw_trajectory(cfg, params, tokens, targets, grad_clip)
    clipped = [k for k in range(ADAMW_STEPS) if norms[k] > grad_clip]
    margin = float(np.min(np.abs(norms / grad_clip - 1)))
    print(f"{name}: grad_clip {grad_clip}; pre-clip norms {np.array2string(norms, precision=4)}; "
          f"clipped steps {clipped}; closest norm {margin:.1%} from the clip")
    print(f"{name}: losses {np.array2string(losses, precision=6)}")
    assert 0 < len(clipped) < ADAMW_STEPS, f"{name}: clipping must be active on some steps, not all"
    # A float32 engine must take the same clip decisions, so no norm may sit on the threshold.
    assert margin > 1e-3, f"{name}: a grad norm is within {margin:.1e} of grad_clip"
    assert np.isfinite(losses).all() and np.isfinite(norms).all(), f"{name}: non-finite trajectory"
    assert losses[0] == loss.item(), f"{name}: first trajectory loss differs from the reference loss"
    assert (np.diff(losses) < 0).all(), f"{name}: loss does not decrease at every AdamW step"

    tensors = {"tokens": tokens, "targets": targets, "logits": logits.detach(),
               "loss": torch.tensor([loss.item()], dtype=torch.float64),
               "adamw.losses": torch.from_numpy(losses), "adamw.grad_norms": torch.from_numpy(norms)}
    for n in params:
        tensors[f"param.{n}"] = params[n]
        tensors[f"grad.{n}"] = grads[n]
        tensors[f"final.{n}"] = final[n]
    metadata = {
        "config": json.dumps({k: (0 if k == "dropout" else v) for k, v in cfg.to_dict().items()}),
        "batch": str(B),
        "seq_len": str(T),
        "adamw": json.dumps({**ADAMW, "grad_clip": grad_clip}),
        "generator": "tools/gen_gpt2_fixture.py",
        "torch_version": torch.__version__,
    }
    path = os.path.join(out_dir, f"gpt2_{name}.safetensors")
    write_safetensors(path, tensors, metadata)
    # Read it back with the reference reader.
    back = load_file(path)
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], tensors[k]) for k in tensors)
    print(f"{name}: wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB, {len(tensors)} tensors)")


def fixture_main(doc, fixtures, generate):
    """The command line of a fixture script: --out-dir, --only NAME; generate(name, spec,
    out_dir) for each fixture chosen."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out-dir", default=os.path.join(root, "tests", "fixtures"))
    ap.add_argument("--only", choices=sorted(fixtures))
    args = ap.parse_args()
    # One thread: reductions then happen in a fixed order, so reruns write identical bytes.
    torch.set_num_threads(1)
    os.makedirs(args.out_dir, exist_ok=True)
    for name, spec in fixtures.items():
        if args.only in (None, name):
            generate(name, spec, args.out_dir)


def main():
    fixture_main(__doc__, FIXTURES, generate)


if __name__ == "__main__":
    main()
