#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/fuzz_hf_index.c into fuzz/corpus/hf_index/: a sharded
set (index + two shards), the same set with the index naming a missing tensor, and a
single model.safetensors without an index, in the target's input layout (u16 index
length, the index, then each shard as a u32 length and its bytes).
Usage: python3 tools/gen_fuzz_hf_index_seeds.py [--out fuzz/corpus/hf_index]"""
import argparse
import json
import os
import struct

import torch
from safetensors.torch import save

def pack(index, shards):
    raw = json.dumps(index).encode() if index is not None else b""
    out = struct.pack("<H", len(raw)) + raw
    for s in shards:
        out += struct.pack("<I", len(s)) + s
    return out

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="fuzz/corpus/hf_index")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    s0 = save({"model.embed_tokens.weight": torch.arange(8, dtype=torch.bfloat16).reshape(4, 2),
               "model.norm.weight": torch.ones(2)})
    s1 = save({"lm_head.weight": torch.full((4, 2), 0.5, dtype=torch.float16)})
    wm = {"model.embed_tokens.weight": "s0.safetensors", "model.norm.weight": "s0.safetensors",
          "lm_head.weight": "s1.safetensors"}
    seeds = {"sharded": pack({"metadata": {"total_size": 40}, "weight_map": wm}, [s0, s1]),
             "index_names_missing": pack({"weight_map": dict(wm, extra="s1.safetensors")}, [s0, s1]),
             "single": pack(None, [s0])}
    for name, data in seeds.items():
        with open(os.path.join(a.out, name), "wb") as f:
            f.write(data)

if __name__ == "__main__":
    main()
