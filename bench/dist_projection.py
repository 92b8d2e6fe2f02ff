#!/usr/bin/env python3
"""Projects the cost of data parallelism's gradient all-reduce against step time, for
GPT-2 small to xl on 8 to 64 GPUs (and, with measured CPU step times, CPU clusters).

A ring all-reduce of S bytes over N ranks moves 2(N-1)/N * S bytes through each rank's
slowest link; its time is that over the bus bandwidth (NCCL's "busbw"). Within one node
the link is NVLink; once the ring spans nodes it is each GPU's InfiniBand NIC. Compute
per GPU is the global batch's share of the training FLOPs (6N + 12LCT per token) at a
given throughput. The reduction runs once per optimizer step, overlapping only the last
micro-step's backward (about 2/3 of that micro-step's compute); what does not fit in that
window is exposed. handgrad's token embedding is final only when backward ends, so its
share of the reduction is always exposed.

    python3 bench/dist_projection.py                       # the stated defaults
    python3 bench/dist_projection.py --gpu-tflops 380 --ib-gbs 45 --grad-bytes 2
    python3 bench/dist_projection.py --cpu-step small:1024:4.1 --cpu-net-gbs 10

Default figures, to be replaced by measurements where available:
  - H100 SXM: NVLink 4, 450 GB/s per direction per GPU; NCCL all-reduce busbw within a
    node taken as 360 GB/s (80%).
  - InfiniBand NDR, 400 Gb/s = 50 GB/s per GPU (one NIC per GPU); busbw across nodes
    taken as 45 GB/s.
  - 8 GPUs per node; a GPU sustains 400 TFLOP/s of bf16 training (40% of 989 dense).
  - global batch 524288 tokens (GPT-2's 0.5M), micro-batch 16 x 1024 tokens per GPU,
    fp32 gradients (4 bytes per parameter).
"""
import argparse
import math

# name: (layers, d_model); V = 50257, Tmax = 1024
MODELS = {"small": (12, 768), "medium": (24, 1024), "large": (36, 1280), "xl": (48, 1600)}
V, TMAX = 50257, 1024


def params(L, C):
    """Parameters with the tied embedding counted once (as hg_config_param_count)."""
    per_layer = 12 * C * C + 13 * C
    return L * per_layer + V * C + TMAX * C + 2 * C


def flops_per_token(L, C, T=TMAX):
    n = params(L, C) - TMAX * C  # without the position embedding (hg_train_flops)
    return 6 * n + 12 * L * C * T


def allreduce_s(nbytes, ranks, busbw):
    return 2 * (ranks - 1) / ranks * nbytes / busbw if ranks > 1 else 0.0


def table(title, rows):
    print(title)
    print("| model | ranks | tokens/rank | compute s | all-reduce s | exposed s | efficiency | no overlap | speedup |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %d | %.3f | %.3f | %.3f | %.0f%% | %.0f%% | %.1fx |" % r)
    print()


def project(name, step_s_per_token, ranks_list, bw_of, a):
    L, C = MODELS[name]
    grad_bytes = params(L, C) * a.grad_bytes
    embedding_share = (V + TMAX) * C / params(L, C)
    base = a.global_batch * step_s_per_token  # one rank, the whole batch, no communication
    rows = []
    for n in ranks_list:
        tokens = a.global_batch / n
        compute = tokens * step_s_per_token
        micro = min(a.micro_tokens, tokens) * step_s_per_token
        comm = allreduce_s(grad_bytes, n, bw_of(n))
        exposed = max(comm * embedding_share, comm - 2.0 / 3.0 * micro)
        step = compute + exposed
        rows.append((name, n, tokens, compute, comm, exposed, 100 * compute / step, 100 * compute / (compute + comm),
                     base / step))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpu-tflops", type=float, default=400.0, help="sustained training TFLOP/s per GPU")
    p.add_argument("--gpu-step", action="append", default=[],
                   help="measured GPU step MODEL:TOKENS:SECONDS, overrides --gpu-tflops for MODEL")
    p.add_argument("--nvlink-gbs", type=float, default=360.0, help="all-reduce busbw within a node, GB/s")
    p.add_argument("--ib-gbs", type=float, default=45.0, help="all-reduce busbw across nodes per GPU, GB/s")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--grad-bytes", type=int, default=4, help="bytes per gradient element (4 fp32, 2 bf16)")
    p.add_argument("--global-batch", type=int, default=524288, help="tokens per optimizer step")
    p.add_argument("--micro-tokens", type=int, default=16384, help="tokens per micro-step per rank")
    p.add_argument("--cpu-step", action="append", default=[],
                   help="measured CPU step MODEL:TOKENS:SECONDS (one node) for a CPU-cluster projection")
    p.add_argument("--cpu-net-gbs", type=float, default=10.0, help="all-reduce busbw between CPU nodes, GB/s")
    a = p.parse_args()

    measured = {}
    for s in a.gpu_step:
        name, tokens, secs = s.split(":")
        measured[name] = float(secs) / float(tokens)
    ranks = [8, 16, 32, 64]
    bw = lambda n: (a.nvlink_gbs if n <= a.gpus_per_node else a.ib_gbs) * 1e9
    print("GPU: %.0f TFLOP/s per GPU unless measured; busbw %.0f GB/s in a node of %d, %.0f GB/s across nodes; "
          "%d-byte gradients; global batch %d tokens, micro-batch %d tokens per GPU\n"
          % (a.gpu_tflops, a.nvlink_gbs, a.gpus_per_node, a.ib_gbs, a.grad_bytes, a.global_batch, a.micro_tokens))
    rows = []
    for name, (L, C) in MODELS.items():
        per_token = measured.get(name, flops_per_token(L, C) / (a.gpu_tflops * 1e12))
        rows += project(name, per_token, ranks, bw, a)
    table("Data parallel on GPUs (speedup against one GPU running the same batch)", rows)

    for s in a.cpu_step:
        name, tokens, secs = s.split(":")
        rows = project(name, float(secs) / float(tokens), [1, 2, 4, 8, 16, 32, 64], lambda n: a.cpu_net_gbs * 1e9, a)
        table("Data parallel on CPU nodes (measured %s s per %s tokens on one node; busbw %.0f GB/s)"
              % (secs, tokens, a.cpu_net_gbs), rows)


if __name__ == "__main__":
    main()
