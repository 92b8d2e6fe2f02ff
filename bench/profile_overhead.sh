#!/usr/bin/env bash
# What the profiler costs: the training step time with the hooks compiled out
# (HANDGRAD_PROFILE=OFF, build-noprof/), compiled in but off (no profiler attached:
# `handgrad bench`), and on (`handgrad profile`, the step region's time). Rounds alternate
# the three so that drift on the machine hits them alike; the medians are compared.
#
# Usage: bench/profile_overhead.sh [ROUNDS] [model flags]   default: 5 --model small --batch 4 --ctx 256
# Run it on a quiet machine; it prints one line per round and a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift || true
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--model small --batch 4 --ctx 256)

scripts/build.sh build
scripts/build.sh build-noprof -DHANDGRAD_PROFILE=OFF

step_of() { # bench --json (a JSON line per pass) or profile --json (one document) -> step seconds
    python3 -c 'import json, sys
text = sys.stdin.read()
try:
    docs = [json.loads(text)]
except ValueError:
    docs = [json.loads(line) for line in text.splitlines() if line.strip()]
for j in docs:
    if j.get("pass") == "step": print(j["mean_s"])
    elif "totals" in j: print(j["totals"]["step_s"])'
}

out=() off=() on=()
for r in $(seq "$rounds"); do
    out+=("$(build-noprof/handgrad bench "${flags[@]}" --pass step --warmup 1 --steps 5 --json | step_of)")
    off+=("$(build/handgrad bench "${flags[@]}" --pass step --warmup 1 --steps 5 --json | step_of)")
    on+=("$(build/handgrad profile "${flags[@]}" --warmup 1 --steps 5 --json | step_of)")
    echo "round $r: compiled out ${out[-1]} s, off ${off[-1]} s, on ${on[-1]} s"
done
python3 - "${out[*]}" "${off[*]}" "${on[*]}" <<'EOF'
import statistics, sys
out, off, on = ([float(v) for v in a.split()] for a in sys.argv[1:4])
m = [statistics.median(v) for v in (out, off, on)]
print(f"median step: compiled out {m[0]:.4f} s, compiled in but off {m[1]:.4f} s ({100 * (m[1] / m[0] - 1):+.2f}%), "
      f"on {m[2]:.4f} s ({100 * (m[2] / m[1] - 1):+.2f}% against off)")
EOF
