#!/usr/bin/env bash
# The main job on its embedded default: install what is missing, build, and run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
threads=$(nproc)
build/handgrad bench --model small --batch 4 --ctx 256 --threads "$threads"
