#!/usr/bin/env bash
# Runs every libFuzzer target in a build folder for N seconds each, starting from the
# committed seed corpora in fuzz/corpus/<target>/. Usage: scripts/fuzz.sh build-fuzz [seconds]
# A longer local run: scripts/fuzz.sh build-fuzz 600
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1; secs=${2:-15}
shopt -s nullglob
for bin in "$dir"/fuzz/fuzz_*; do
  [[ -x "$bin" ]] || continue
  name=$(basename "$bin")
  work=$(mktemp -d)
  seeds=fuzz/corpus/${name#fuzz_}
  [[ -d "$seeds" ]] && cp -r "$seeds"/. "$work"/
  echo "fuzz: $name for ${secs}s"
  "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=0 "$work" 2>&1 | tail -n 3
  rm -rf "$work"
done
