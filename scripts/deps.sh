#!/usr/bin/env bash
# Installs what handgrad needs on a Debian machine, skipping what is already there.
# Idempotent: safe to run on every build. Usage: scripts/deps.sh [--test]
set -euo pipefail

# Debian packages: compiler and build, and the libraries handgrad links.
pkgs=(build-essential cmake pkg-config
      libdnnl-dev      # oneDNN: CPU GEMM
      libpcre2-dev     # PCRE2 (JIT): GPT-2 pre-tokenization regex
      libutf8proc-dev  # utf8proc: NFC normalization of tokenizer.json normalizers (Qwen2's)
      libcjson-dev     # cJSON: safetensors headers, configs, JSONL logs, vocab.json
      libopenmpi-dev openmpi-bin  # MPI: data-parallel training across processes (optional at build time)
      bible-kjv)       # the King James Bible: the demo's default corpus (scripts/kjv_corpus.sh)
if [[ "${1:-}" == "--test" ]]; then
  pkgs+=(clang libclang-rt-14-dev libomp-dev)  # libFuzzer targets, sanitizer and OpenMP runtimes for clang
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
