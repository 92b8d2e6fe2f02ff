#!/usr/bin/env bash
# The demo's default data: the King James Bible, a BPE tokenizer trained on it (no
# download needed), and train/val token shards. Writes data/kjv/{kjv.txt, tokenizer/,
# train_*.bin, val_*.bin}. Idempotent: skips the steps whose output exists.
# Usage: scripts/prepare_kjv.sh [vocab_size]   (default 8192; needs a build of handgrad)
set -euo pipefail
cd "$(dirname "$0")/.."
vocab=${1:-8192}
hg=build/handgrad
[[ -x "$hg" ]] || { echo "prepare_kjv: build handgrad first (scripts/build.sh)" >&2; exit 1; }
scripts/kjv_corpus.sh data/kjv/kjv.txt
[[ -s data/kjv/tokenizer/vocab.json ]] ||
  "$hg" tokenizer train --vocab-size "$vocab" --out data/kjv/tokenizer data/kjv/kjv.txt
[[ -s data/kjv/train_000000.bin ]] ||
  "$hg" prepare --tokenizer data/kjv/tokenizer --out data/kjv --val-fraction 0.05 data/kjv/kjv.txt
