#!/usr/bin/env bash
# Configures and builds handgrad into a build folder. Usage: scripts/build.sh [dir] [cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
