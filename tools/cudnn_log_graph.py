#!/usr/bin/env python3
"""Condenses a cuDNN backend API log (CUDNN_LOGINFO_DBG=1) into its graphs.

For each operation graph in the log: the tensors (unique id, type, dimensions, strides,
virtual, by value) and the operations in the order they were finalized, with their
tensors by unique id and their mode and math precision; then the unique ids of each
variant pack. (The log does not always dump a by-value operand of an operation, such as
a select's fill value: see the variant pack.) This is how the graphs in src/backend/cuda/cudnn_attention.c were checked
against PyTorch's (scripts/gpu_session.sh cudnn-ref writes the log).
Usage: tools/cudnn_log_graph.py LOG [--graphs N]
"""
import argparse
import gzip
import re


def field(body, key):
    m = re.search(key + r": type=[^;]*; val=([^;\n]*)", body)
    return m.group(1) if m else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--graphs", type=int, default=2, help="graphs to print (default 2: a forward and a backward)")
    args = ap.parse_args()
    opener = gzip.open if args.log.endswith(".gz") else open
    with opener(args.log, "rt") as f:
        calls = f.read().split("\nI! CuDNN")
    graphs = 0
    for call in calls:
        m = re.search(r"function (\w+)\(\) called:", call)
        if not m:
            continue
        fn = m.group(1)
        if fn == "cudnnBackendFinalize":
            t = re.search(r"descriptor: type=CUDNN_BACKEND_TENSOR_DESCRIPTOR:\n((?:i!         .*\n?)*)", call)
            if t:
                b = t.group(1)
                print(f"  tensor uid {field(b, 'uid'):>3} {field(b, 'type'):26} dims {field(b, 'dimA'):22} "
                      f"strides {field(b, 'strideA'):30} virtual={field(b, 'isVirtual')} by_value={field(b, 'isByVal')}")
                continue
            o = re.search(r"descriptor: type=CUDNN_BACKEND_(OPERATION_\w+)_DESCRIPTOR:", call)
            if o:
                slots = re.findall(r"i!         (\w+): type=CUDNN_BACKEND_TENSOR_DESCRIPTOR:\n(?:i!             .*\n)*?"
                                   r"i!             uid: type=int64_t; val=(-?\d+);", call)
                modes = re.findall(r"(mode|mathPrec|axis)\w*: type=[^;]*; val=([^;\n]*)", call)
                print(f"  {o.group(1).lower():22} " + " ".join(f"{s}={u}" for s, u in slots) + "  "
                      + " ".join(f"{k}={v}" for k, v in modes))
                continue
            if re.search(r"i!     descriptor: type=CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR", call):
                graphs += 1
                print(f"== graph {graphs} finalized")
                if graphs >= args.graphs:
                    break
        elif fn == "cudnnBackendSetAttribute" and "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS" in call:
            print("  variant pack uids:", ", ".join(re.findall(r"\[\d+\]: type=[^;]*; val=([^;\n]*)", call)))


if __name__ == "__main__":
    main()
