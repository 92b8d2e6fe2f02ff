#!/usr/bin/env bash
# The main job on its embedded default: install what is missing, build, prepare the
# default corpus (the King James Bible, with a tokenizer trained on it), and benchmark
# GPT-2 small against this machine's sgemm ceiling.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
scripts/prepare_kjv.sh
build/handgrad bench --model small --batch 4 --ctx 256 --threads "$(nproc)"
