"""Writes the GPT-2 safetensors fixtures in tests/fixtures/ that the C tests compare against.

Parameters and batches are drawn in float32 from fixed seeds; the reference forward,
backward and a 10-step AdamW trajectory are computed in float64 from those exact values.
Attention in the reference is the explicit masked softmax (attn_impl="math").
gpt2_packed packs documents into rows (draw_packed_batch): learned positions wpe(positions)
restart at each document, and a token attends to the earlier tokens of its own document
only; its float32 run and stock transformers' GPT2LMHeadModel (eager, position_ids given
and no attention_mask: its own packed-sequence mask) must agree with the float64 reference.
Usage: python3 tools/gen_gpt2_fixture.py [--out-dir tests/fixtures] [--only odd|packed|tiny]

Contents of each file (little-endian, row-major):
  tokens, targets        I32 (B, T); a target of -1 is ignored
  positions              I32 (B, T), packed fixtures only: the position of each token in its
                         document, 0 starting a new one, else the previous position + 1;
                         token i attends to keys j with i - positions[i] <= j <= i
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
import torch.nn.functional as F
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import GPT, GPTConfig, param_groups  # noqa: E402

FIXTURES = {
    "odd": dict(cfg=GPTConfig(vocab_size=1000, max_seq_len=64, n_layer=2, n_head=3, d_model=96, d_ff=384),
                batch=3, seq_len=37, seed=1001),
    "tiny": dict(cfg=GPTConfig(vocab_size=512, max_seq_len=64, n_layer=2, n_head=4, d_model=64, d_ff=256),
                 batch=2, seq_len=64, seed=1002),
    # tiny's model; rows of (length, prompt) documents, see draw_packed_batch.
    "packed": dict(cfg=GPTConfig(vocab_size=512, max_seq_len=64, n_layer=2, n_head=4, d_model=64, d_ff=256),
                   batch=3, seq_len=32, seed=1003,
                   rows=[dict(docs=[(11, 3), (1, 0), (13, 2)], pad=7),
                         dict(docs=[(5, 0), (18, 2), (9, 0)], cut=True),
                         dict(docs=[(1, 0), (7, 2), (16, 3), (4, 0)], pad=4)]),
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


def draw_packed_batch(V, B, T, rows, rng):
    """Rows packed with documents. rows[b]: docs [(length, prompt)], then pad padding tokens
    (id 0, one more document, every target -1); cut: the last document runs on past the
    row. Tokens uniform in [0, V); targets[t] = the next token of t's document, -1 at a
    document's last token (a cut document's is its next token, beyond the row) and on the
    first `prompt` tokens of a document (a loss mask). positions restart at 0 with each
    document."""
    assert len(rows) == B
    stream = rng.integers(0, V, size=(B, T + 1), dtype=np.int32)  # column T: a cut document's next token
    tokens, targets, positions = stream[:, :T].copy(), np.full((B, T), -1, np.int32), np.zeros((B, T), np.int32)
    for b, row in enumerate(rows):
        t = 0
        for n, prompt in row["docs"]:
            assert n >= 1 and 0 <= prompt < n
            positions[b, t:t + n] = np.arange(n)
            targets[b, t + prompt:t + n - 1] = stream[b, t + prompt + 1:t + n]
            t += n
        if row.get("cut"):
            assert t == T and not row.get("pad")
            targets[b, T - 1] = stream[b, T]
        pad = row.get("pad", 0)
        assert t + pad == T, f"row {b}: documents and padding cover {t + pad} of {T} tokens"
        tokens[b, t:] = 0
        positions[b, t:] = np.arange(pad)
    assert not (targets == -1).all(axis=1).any(), "a row has every target ignored"
    return torch.from_numpy(tokens), torch.from_numpy(targets), torch.from_numpy(positions)


def doc_mask(positions, window=0):
    """(B, 1, T, T) bool, True where query i may attend to key j: the same document
    (documents numbered by the zeros of positions), j <= i, and with a window W > 0 also
    j > i - W."""
    T = positions.shape[1]
    doc = (positions == 0).cumsum(-1)
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    ok = (doc[:, :, None] == doc[:, None, :]) & (j <= i)
    if window:
        ok &= j > i - window
    return ok[:, None]


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


def packed_forward(model, tokens, targets, positions):
    """torch_gpt2's GPT.forward (attn_impl "math") with documents packed in a row: learned
    positions wpe(positions), and attention within a document only (doc_mask)."""
    B, T = tokens.shape
    C, NH = model.cfg.d_model, model.cfg.n_head
    hs = C // NH
    mask = doc_mask(positions)
    x = model.wte(tokens.long()) + model.wpe(positions.long())
    for block in model.h:
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in block.attn.c_attn(block.ln_1(x)).split(C, dim=2))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + block.attn.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        x = x + block.mlp(block.ln_2(x))
    logits = model.ln_f(x) @ model.wte.weight.t()
    return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1).long(), ignore_index=-1)


def forward(model, tokens, targets, positions=None):
    """(logits, loss): the model's own forward, or packed_forward given positions."""
    return model(tokens, targets) if positions is None else packed_forward(model, tokens, targets, positions)


def transformers_check(name, cfg, params, tokens, targets, positions, logits, loss, grads):
    """Stock transformers' GPT2LMHeadModel (eager; position_ids and no attention_mask, so
    it builds its packed-sequence mask itself) in float64 and float32 against the reference."""
    import transformers  # only here: the unpacked fixtures need no transformers
    hf = transformers.GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.max_seq_len, n_embd=cfg.d_model,
                                 n_layer=cfg.n_layer, n_head=cfg.n_head, n_inner=cfg.d_ff,
                                 activation_function="gelu_pytorch_tanh", layer_norm_epsilon=1e-5,
                                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                                 use_cache=False, attn_implementation="eager")
    for dtype in (torch.float64, torch.float32):
        m = transformers.GPT2LMHeadModel(hf).to(dtype).eval()
        m.transformer.load_state_dict({k: v.to(dtype) for k, v in params.items()}, strict=True)
        assert m.lm_head.weight is m.transformer.wte.weight
        lg = m(input_ids=tokens.long(), position_ids=positions.long(), use_cache=False).logits
        ls = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), targets.reshape(-1).long(), ignore_index=-1)
        ls.backward()
        g = {n[len("transformer."):]: p.grad for n, p in m.named_parameters()}
        assert g.keys() == grads.keys()
        rel_loss = abs(ls.item() - loss.item()) / abs(loss.item())
        rel_logits = ((lg.detach().double() - logits).abs().max() / logits.abs().max()).item()
        rel_grad = max(((g[k].double() - grads[k]).norm() / grads[k].norm()).item() for k in grads)
        print(f"{name}: stock transformers {transformers.__version__} {str(dtype)[6:]}: loss rel {rel_loss:.1e}; "
              f"logits max rel {rel_logits:.1e}; worst grad rel-norm err {rel_grad:.1e}")
        tol = (1e-12, 1e-12, 1e-10) if dtype == torch.float64 else (1e-5, 1e-5, 1e-4)
        assert rel_loss < tol[0] and rel_logits < tol[1] and rel_grad < tol[2], f"{name}: transformers disagrees"


def adamw_trajectory(cfg, params, tokens, targets, grad_clip, positions=None):
    """Losses before each update, pre-clip grad norms, and the final float64 parameters."""
    model = build(cfg, params, torch.float64)
    opt = torch.optim.AdamW(param_groups(model, ADAMW["weight_decay"]), lr=ADAMW["lr"],
                            betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"], foreach=False)
    losses, norms = [], []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = forward(model, tokens, targets, positions)
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
    positions = None
    if "rows" in spec:
        tokens, targets, positions = draw_packed_batch(cfg.vocab_size, B, T, spec["rows"], rng)
    else:
        tokens, targets = draw_batch(cfg.vocab_size, B, T, rng)

    model = build(cfg, params, torch.float64)
    logits, loss = forward(model, tokens, targets, positions)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    assert math.isfinite(loss.item()), f"{name}: loss is not finite"

    # Self-check: float32 agrees with the float64 reference.
    model32 = build(cfg, params, torch.float32)
    logits32, loss32 = forward(model32, tokens, targets, positions)
    loss32.backward()
    rel_loss = abs(loss32.item() - loss.item()) / abs(loss.item())
    rel_logits = ((logits32.double() - logits).abs().max() / logits.abs().max()).item()
    rel_grad = max(((p.grad.double() - grads[n]).norm() / grads[n].norm()).item()
                   for n, p in model32.named_parameters())
    print(f"{name}: loss f64 {loss.item():.12f} f32 {loss32.item():.12f} rel {rel_loss:.2e}; "
          f"logits max rel {rel_logits:.2e}; worst grad rel-norm err {rel_grad:.2e}")
    assert rel_loss < 1e-5, f"{name}: float32 loss disagrees with float64 by {rel_loss:.2e}"
    if positions is not None:
        transformers_check(name, cfg, params, tokens, targets, positions, logits.detach(), loss, grads)
        with torch.no_grad():  # the documents must matter: one causal sequence per row differs
            whole = model(tokens, targets)[0]
        moved = ((whole - logits).abs().max() / logits.abs().max()).item()
        print(f"{name}: without positions (one causal sequence per row) logits move by max rel {moved:.1e}")
        assert moved > 1e-2, f"{name}: packing hardly matters"

    # Choose the clip from an unclipped run, then check that it clips some steps, not all.
    _, free_norms, _ = adamw_trajectory(cfg, params, tokens, targets, math.inf, positions)
    grad_clip = pick_grad_clip(free_norms)
    losses, norms, final = adamw_trajectory(cfg, params, tokens, targets, grad_clip, positions)
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
    if positions is not None:
        tensors["positions"] = positions
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
