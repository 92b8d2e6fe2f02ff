"""What the side-by-side scripts (compare_recompute.py, compare_lora.py) share: running one
configuration in a fresh process and taking its step row, and the medians they report."""
import json
import os
import statistics
import subprocess
import sys


def run_step(cmd, tag):
    """The step row of cmd's JSON lines, or {"error": ...}; cmd is echoed to stderr after tag."""
    print(f"{tag}: " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if row.get("pass") == "step":
                return row
    tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit status {p.returncode}: {tail}"}


def seconds(row):
    """A row's step time: its median, else its mean."""
    t = row.get("median_s")
    return t if isinstance(t, (int, float)) and t == t else row.get("mean_s")


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return statistics.median(xs) if xs else None


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "n/a"
