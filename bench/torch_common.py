"""What the PyTorch benchmark scripts share: thread set-up, a memory guard, timing and rows.

Each script runs one configuration per process, so the process's peak RSS is that
configuration's. The memory guard caps the process's address space at what the machine
has available (less a margin), so a configuration too large for this machine fails with
an allocation error, reported as OOM, instead of swapping or waking the OOM killer.
"""
import os
import resource
import statistics
import time
import traceback

MARGIN = 1 << 30  # left to the rest of the machine


def set_threads(threads):
    """Must run before torch is imported: its OpenMP and MKL read these at load."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("OPENBLAS_CORETYPE", "SkylakeX")  # Debian's OpenBLAS mis-detects Zen 4


def meminfo_bytes(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return None


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def available_bytes():
    return meminfo_bytes("MemAvailable") or 1 << 62


def guard_memory():
    """Caps the address space at the current one plus what is available now, less a
    margin. Returns the bytes this process may still allocate."""
    room = max(available_bytes() - MARGIN, 0)
    limit = status_bytes("VmSize") + room
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return room


def is_oom(exc):
    """An allocation failure as PyTorch or Python reports it."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text
                                              or "not enough memory" in text)


def times(fn, warmup, steps):
    """Runs fn warmup + steps times; returns the timed steps' seconds."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def timed(fn, warmup, steps):
    """Runs fn warmup + steps times; returns (mean, std) seconds over the timed steps."""
    ts = times(fn, warmup, steps)
    return statistics.fmean(ts), (statistics.stdev(ts) if len(ts) > 1 else 0.0)


def record_failure(row, e):
    """An exception of a worker's run into its row: OOM noted (status 0), anything else
    printed and kept as the row's error (status 1)."""
    if is_oom(e):
        row.update(oom=True, note=f"OOM: {str(e).strip().splitlines()[0]}"[:160])
        return 0
    traceback.print_exc()
    row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]
    return 1


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gib(n):
    return n / 2**30
