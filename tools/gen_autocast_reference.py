"""Writes tests/fixtures/autocast.json: PyTorch's bf16 autocast losses over the 10-step AdamW
trajectory of each model fixture, the yardstick for handgrad's bf16 training in the C tests.

For each of gpt2_odd, gpt2_tiny, gpt2_packed (tools/gen_gpt2_fixture.py) and llama_gqa,
qwen2_bias, qwen3_qknorm, gemma_geglu, gemma2_sandwich, phi3_partial, olmo2_postnorm,
phi2_parallel, llama_packed, gemma2_packed, mistral_window (tools/gen_llama_fixture.py),
the reference model of its generator is built in float32 from the fixture's initial
parameters (param.<name>, handgrad's layout, mapped with the generator's own functions,
the transformers config made by its make_config): torch_gpt2.GPT (attn_impl "math") for
GPT-2, and transformers' stock classes (LlamaForCausalLM ... PhiForCausalLM,
MistralForCausalLM; eager attention, with their float32 casts left in) for the rest.
The packed fixtures (a positions tensor: documents packed in a row, positions restarting
at 0) run gen_gpt2_fixture.packed_forward (wpe(positions), attention within a document)
for gpt2_packed, and for the others the transformers model with position_ids = positions
and no attention_mask, so that transformers builds its packed-sequence masks itself (with
the sliding window on its sliding layers: gemma2_packed's layer 0, both of
mistral_window's); each layer's mask is checked, on every forward, to be the generator's
handgrad_masks. It then takes the fixture's 10 AdamW steps on the
fixture's tokens and targets, with the forward and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) and the backward outside it, recording the loss
before each update. The update rule is the generators': torch.nn.utils.clip_grad_norm_ with
the fixture's grad_clip, then torch.optim.AdamW(foreach=False) with the fixture's lr, betas,
eps and weight_decay (decay on the tensors of dim >= 2 only); the loss is the generator's
mean cross-entropy over targets already aligned with tokens, -1 ignored.

As a check of the mapping and the update rule, the same 10 steps run first in plain float32
and must match the fixture's float64 adamw.losses to 1e-4 relative; otherwise nothing is
written and the script exits non-zero.
The bf16 kernels, and so the losses' last digits, depend on the CPU's vector ISA: the
script pins AVX2 (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, set before torch
loads), the ISA the committed numbers were made with, so that an AVX-512 CPU writes them
too (without the pin, an AVX512-BF16 CPU changes every entry's losses after step 0).
Rerunning it leaves the existing entries' numbers as they were (checked 2026-11-27 when
the five newer fixtures were added, and again when the four packed ones were).
Usage: python3 tools/gen_autocast_reference.py [--out tests/fixtures/autocast.json]
                                               [--fixtures-dir tests/fixtures]

autocast.json:
  generator, torch_version, transformers_version, note
  fixtures.<file>.losses               the 10 autocast losses (float32 values)
  fixtures.<file>.float64_losses       the fixture's adamw.losses
  fixtures.<file>.worst_abs_deviation  max over k of |losses[k] - float64_losses[k]|
"""
import argparse
import contextlib
import json
import os
import sys
from unittest import mock

# The bf16 kernels, and so the autocast losses, depend on the CPU's vector ISA; the
# committed numbers are those of AVX2 (ATen's AVX2 kernels, oneDNN at most AVX2), which
# are pinned here, before torch loads, so that a CPU with AVX-512 or AVX512-BF16 writes
# the same bytes.
os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_gpt2_fixture as gpt2  # noqa: E402
import gen_llama_fixture as llama  # noqa: E402
from torch_gpt2 import GPTConfig  # noqa: E402

FIXTURES = ["gpt2_odd.safetensors", "gpt2_tiny.safetensors", "llama_gqa.safetensors",
            "qwen2_bias.safetensors", "qwen3_qknorm.safetensors", "gemma_geglu.safetensors",
            "gemma2_sandwich.safetensors", "phi3_partial.safetensors", "olmo2_postnorm.safetensors",
            "phi2_parallel.safetensors", "gpt2_packed.safetensors", "llama_packed.safetensors",
            "gemma2_packed.safetensors", "mistral_window.safetensors"]
STEPS = gpt2.ADAMW_STEPS
FLOAT32_TOL = 1e-4  # plain float32 against the float64 trajectory, relative per step
NOTE = ("float32 model under torch.autocast cpu bfloat16, 10 AdamW steps from each "
        "fixture's initial parameters")


def load_fixture(path):
    """The fixture's tensors, metadata, and a (build(dtype) -> model, run(model) -> loss) pair
    made from its generator's own functions."""
    tensors = load_file(path)
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    params = {k[len("param."):]: v for k, v in tensors.items() if k.startswith("param.")}
    tokens, targets = tensors["tokens"], tensors["targets"]
    positions = tensors.get("positions")  # packed fixtures only
    stem = os.path.basename(path).rsplit(".", 1)[0]
    config = json.loads(meta["config"])
    if meta["generator"] == "tools/gen_gpt2_fixture.py":
        cfg = GPTConfig(**config)
        spec = gpt2.FIXTURES[stem[len("gpt2_"):]]
        assert cfg == spec["cfg"], f"{stem}: config differs from the generator's"
        assert (positions is None) == ("rows" not in spec), f"{stem}: positions and the generator's rows disagree"

        def build(dtype):
            return gpt2.build(cfg, params, dtype)

        def run(model):  # the model's own forward, or packed_forward given positions
            return gpt2.forward(model, tokens, targets, positions)[1]
    elif meta["generator"] == "tools/gen_llama_fixture.py":
        spec = llama.FIXTURES[stem]
        assert llama.handgrad_config(spec) == config, f"{stem}: config differs from the generator's"
        assert meta["hf_class"] == llama.ARCH[spec["arch"]][1].__name__, f"{stem}: hf_class {meta['hf_class']}"

        assert (positions is None) == ("rows" not in spec), f"{stem}: positions and the generator's rows disagree"

        def build(dtype):
            return llama.build(spec, params, dtype)

        def run(model):
            if positions is None:
                return llama.run(model, tokens, targets)[1]
            # position_ids = positions, no attention_mask: transformers' own packed-sequence
            # masks, each layer's checked against handgrad's (documents, and the window).
            mod, seen = llama.ARCH[spec["arch"]][2], {}
            eager = mod.eager_attention_forward

            def spy(module, query, key, value, attention_mask, *args, **kwargs):
                seen[module.layer_idx] = attention_mask
                return eager(module, query, key, value, attention_mask, *args, **kwargs)

            with mock.patch.object(mod, "eager_attention_forward", spy):
                loss = llama.run(model, tokens, targets, positions, stock_mask=True)[1]
            want = llama.handgrad_masks(config, positions)
            assert sorted(seen) == list(range(len(want))), f"{stem}: layers seen {sorted(seen)}"
            assert all(torch.equal(seen[l] == 0, want[l]) for l in seen), f"{stem}: transformers' masks differ"
            return loss
    else:
        raise SystemExit(f"{path}: unknown generator {meta['generator']!r}")
    assert tuple(tokens.shape) == (int(meta["batch"]), int(meta["seq_len"])) == tuple(targets.shape)
    assert positions is None or (positions.dtype == torch.int32 and positions.shape == tokens.shape)
    return tensors, meta, build, run


def trajectory(build, run, adamw, autocast):
    """Losses before each update and pre-clip grad norms of the 10 AdamW steps from the
    fixture's initial parameters, the model in float32, its forward and loss optionally
    under CPU bf16 autocast."""
    torch.manual_seed(0)
    model = build(torch.float32)
    ps = list(model.parameters())  # a tied lm_head is listed once
    groups = [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": adamw["weight_decay"]},
              {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=adamw["lr"], betas=(adamw["beta1"], adamw["beta2"]), eps=adamw["eps"],
                            foreach=False)
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
        with ctx:
            loss = run(model)
        assert loss.dtype == torch.float32, f"loss is {loss.dtype}"
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), adamw["grad_clip"]).item())
        losses.append(loss.item())
        opt.step()
    return np.array(losses), np.array(norms)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "autocast.json"))
    ap.add_argument("--fixtures-dir", default=os.path.join(root, "tests", "fixtures"))
    args = ap.parse_args()
    # One thread: reductions then happen in a fixed order, so reruns write identical bytes.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        print(f"warning: ATen runs {torch.backends.cpu.get_cpu_capability()} kernels, not AVX2: the autocast losses "
              "will differ from the committed ones in their last digits", file=sys.stderr)

    out = {"generator": "tools/gen_autocast_reference.py", "torch_version": torch.__version__,
           "transformers_version": transformers.__version__, "note": NOTE, "fixtures": {}}
    failures = []
    for fname in FIXTURES:
        path = os.path.join(args.fixtures_dir, fname)
        tensors, meta, build, run = load_fixture(path)
        adamw = json.loads(meta["adamw"])
        ref = tensors["adamw.losses"].numpy()
        ref_norms = tensors["adamw.grad_norms"].numpy()
        assert ref.shape == (STEPS,), f"{fname}: adamw.losses has shape {ref.shape}"

        # Check: plain float32 reproduces the float64 trajectory.
        f32, f32_norms = trajectory(build, run, adamw, autocast=False)
        rel = np.abs(f32 - ref) / np.abs(ref)
        norm_rel = np.abs(f32_norms - ref_norms) / ref_norms
        print(f"{fname}: float32 against float64: worst loss rel {rel.max():.1e}, "
              f"worst grad norm rel {norm_rel.max():.1e}")
        if not (rel.max() <= FLOAT32_TOL):
            failures.append(f"{fname}: plain float32 losses differ from the fixture's float64 adamw.losses by "
                            f"{rel.max():.2e} relative (tolerance {FLOAT32_TOL:g}) at step {int(rel.argmax())}; "
                            f"float32 {f32.tolist()}, float64 {ref.tolist()}")
            continue

        ac, ac_norms = trajectory(build, run, adamw, autocast=True)
        assert np.isfinite(ac).all(), f"{fname}: non-finite autocast loss"
        dev = np.abs(ac - ref)
        worst = float(dev.max())
        clip = adamw["grad_clip"]
        flips = [k for k in range(STEPS) if (ac_norms[k] > clip) != (ref_norms[k] > clip)]
        print(f"{fname}: autocast losses {np.array2string(ac, precision=6, max_line_width=200)}")
        print(f"{fname}: float64 losses  {np.array2string(ref, precision=6, max_line_width=200)}")
        print(f"{fname}: worst |autocast - float64| {worst:.4g} at step {int(dev.argmax())}, "
              f"{worst / ref[0]:.2e} of loss[0]; clip decisions that differ from float64: {flips or 'none'}")
        out["fixtures"][fname] = {"losses": [float(x) for x in ac], "float64_losses": [float(x) for x in ref],
                                  "worst_abs_deviation": worst}

    if failures:
        sys.exit("mapping or update-rule check failed, nothing written:\n" + "\n".join(failures))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
