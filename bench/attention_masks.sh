#!/usr/bin/env bash
# Attention under packed documents and sliding windows against plain causal attention, in
# rounds that alternate the two, with the ratio of forward + backward per round:
#   documents: T = 4096 holding 16 documents of 256 (--doc-len 256)
#   window:    T = 8192 with a window of 1024 (--window 1024)
# Usage: bench/attention_masks.sh [BUILD_DIR] [ROUNDS] [HEAD_DIMS]   (defaults build 3 64)
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
dims=${3:-64}
hg=$build/handgrad
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
# one cell: its forward + backward milliseconds
cell() { # cell CTX HS MASK_FLAGS...
  local ctx=$1 hs=$2
  shift 2
  "$hg" bench --attention --ctx "$ctx" --head-dims "$hs" --steps 3 --warmup 1 "$@" |
    awk -v ctx="$ctx" -v hs="$hs" '$1 == hs && $2 == ctx && NF >= 9 { print $4 + $6 }'
}
for hs in ${dims//,/ }; do
  for what in documents window; do
    if [ "$what" = documents ]; then ctx=4096 flag="--doc-len 256"; else ctx=8192 flag="--window 1024"; fi
    for r in $(seq 1 "$rounds"); do
      plain=$(cell "$ctx" "$hs")
      masked=$(cell "$ctx" "$hs" $flag)
      awk -v w="$what" -v r="$r" -v hs="$hs" -v ctx="$ctx" -v f="$flag" -v p="$plain" -v m="$masked" \
        'BEGIN { printf "%-9s head %3d T %5d %-14s round %d: causal %8.1f ms, masked %7.1f ms, %5.2fx\n", w, hs, ctx, f, r, p, m, p / m }'
    done
  done
done
