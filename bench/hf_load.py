#!/usr/bin/env python3
"""Makes a SmolLM-135M-shaped LlamaForCausalLM folder in bfloat16 (random weights,
transformers' save_pretrained, one file) and times bench's hf_load on it: the weight
load against read()ing the same bytes from the page cache.
Usage: python3 bench/hf_load.py [--build build] [--dir /tmp/hg_smollm_bf16] [--threads N]"""
import argparse
import os
import subprocess

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--dir", default="/tmp/hg_smollm_bf16")
ap.add_argument("--threads", default="0")
ap.add_argument("--repeats", default="7")
a = ap.parse_args()
if not os.path.exists(os.path.join(a.dir, "config.json")):
    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(a.dir, max_shard_size="10GB")
subprocess.run([os.path.join(a.build, "bench", "hf_load"), a.dir, a.repeats, a.threads], check=True)
