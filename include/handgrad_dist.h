/* handgrad_dist.h - data-parallel training across processes (included by handgrad.h).
 *
 * Each rank holds a replica of the model, computes gradients on its own micro-batches,
 * and the ranks sum their gradients. Communication goes through a communicator: MPI
 * between processes on CPUs (launched by mpirun or srun), NCCL between GPUs, or a
 * single-rank one that makes the same code run in one process without MPI.
 *
 * The gradient all-reduce is bucketed (hg_dist_options.bucket_bytes) and started from
 * the model's gradient-ready hook as soon as a bucket's layers are final, so it overlaps
 * the rest of the backward pass. With zero = 1 (ZeRO-1) the AdamW state is sharded:
 * gradients are reduce-scattered, each rank updates its slice of the parameters, and
 * the parameters are all-gathered.
 *
 * Example: a step over a global batch of B sequences on N ranks.
 *
 *     hg_comm *comm;
 *     hg_comm_open(&comm, HG_COMM_AUTO);            // MPI under mpirun/srun, else one rank
 *     int N = hg_comm_size(comm), r = hg_comm_rank(comm);
 *     hg_dist_options dopt = hg_dist_options_default();
 *     dopt.zero = 1; dopt.global_batch = B;          // B % N != 0 is an error on every rank
 *     hg_options opt = hg_options_default();
 *     opt.batch = B / N; opt.seq_len = T;
 *     opt.shards = N; opt.shard = r;                 // only with zero = 1
 *     hg_model_create(&m, &cfg, &opt);
 *     hg_dist *d;
 *     hg_dist_create(&d, comm, m, &dopt);            // checks every rank runs the same config
 *     for (int step = 0; step < steps; step++) {
 *         hg_zero_grad(m);
 *         for (int k = 0; k < accum; k++)            // this rank's slice of the batch
 *             hg_dist_forward_backward(d, x[k], y[k], B / N, T, 1.0f / accum, k == accum - 1, &loss);
 *         hg_dist_optimizer_step(d, &adamw, &grad_norm);
 *     }
 *     hg_dist_free(d); hg_model_free(m); hg_comm_close(comm);
 *
 * Every collective waits at most hg_dist_options.timeout_s: when a rank dies or hangs,
 * the others return HG_ERR_BACKEND with a message saying which collective stalled, and
 * the communicator is marked broken (no further collectives; hg_comm_close does not wait
 * for the dead rank). */
#ifndef HANDGRAD_DIST_H
#define HANDGRAD_DIST_H

#ifdef __cplusplus
extern "C" {
#endif
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC visibility push(default) /* what a shared libhandgrad exports: this API only */
#endif

/* ---------------------------------------------------------- communicators */

typedef struct hg_comm hg_comm;

typedef enum hg_comm_kind {
    HG_COMM_AUTO,  /* MPI when started by a launcher (mpirun, srun), else LOCAL */
    HG_COMM_LOCAL, /* one rank, no communication */
    HG_COMM_MPI,   /* MPI_COMM_WORLD; initialises MPI unless the caller already has */
    HG_COMM_NCCL,  /* NCCL between GPUs, bootstrapped over MPI (CUDA builds only) */
} hg_comm_kind;

/* HG_ERR_UNSUPPORTED when this build lacks the kind (AUTO under a launcher with more
 * than one rank included). */
hg_status hg_comm_open(hg_comm **out, hg_comm_kind kind);
/* Finalises MPI if hg_comm_open initialised it, unless a collective failed. */
void hg_comm_close(hg_comm *c);
int hg_comm_rank(const hg_comm *c);
int hg_comm_size(const hg_comm *c);
const char *hg_comm_name(const hg_comm *c); /* "local", "mpi", "nccl" */
/* All ranks meet, waiting at most timeout_s seconds. */
hg_status hg_comm_barrier(hg_comm *c, double timeout_s);

/* ------------------------------------------------------- data parallelism */

typedef struct hg_dist_options {
    int zero;             /* 0: every rank holds the whole AdamW state; 1: ZeRO-1 */
    size_t bucket_bytes;  /* gradient bucket size; default 25 MiB */
    double timeout_s;     /* longest wait in any collective; default 300 s */
    int global_batch;     /* if > 0, checked to be divisible by the number of ranks */
    uint64_t config_hash; /* the caller's hash of its own settings (lr, data, ...),
                             compared across ranks with the model's config */
} hg_dist_options;

hg_dist_options hg_dist_options_default(void);

typedef struct hg_dist hg_dist;

/* Collective. Checks that every rank runs the same binary with the same model config,
 * batch, sequence length, seed, dist options and config_hash (a clear error on every
 * rank otherwise), copies rank 0's parameters to all ranks, and installs the model's
 * gradient-ready hook (not on one rank without ZeRO-1, which has nothing to reduce: its
 * CUDA steps may then replay as graphs, HG_FLAG_CUDA_GRAPHS). With zero = 1 the model must have been created with
 * shards = ranks, shard = rank. A CUDA model runs on one rank with zero = 0 only
 * (HG_ERR_UNSUPPORTED otherwise; docs/cuda.md). The model and communicator must outlive
 * the hg_dist. */
hg_status hg_dist_create(hg_dist **out, hg_comm *c, hg_model *m, const hg_dist_options *o);
void hg_dist_free(hg_dist *d);

/* hg_forward_backward on this rank's micro-batch. With reduce = 1 (the last micro-step
 * of an accumulation) the gradients are summed across ranks in buckets while backward
 * runs; with reduce = 0 they only accumulate locally. */
hg_status hg_dist_forward_backward(hg_dist *d, const int32_t *tokens, const int32_t *targets, int B, int T,
                                   float grad_scale, int reduce, float *loss);

/* Collective. Finishes the gradient reduction, then one AdamW step on the mean of the
 * ranks' gradients, clipped by their global norm (returned in grad_norm, may be NULL);
 * with zero = 1 each rank updates its slice and the parameters are all-gathered. After
 * it, every rank holds the same parameters. */
hg_status hg_dist_optimizer_step(hg_dist *d, const hg_adamw *a, float *grad_norm);

/* Collective: finishes the gradient reduction and updates nothing (a skipped step). */
hg_status hg_dist_drop_step(hg_dist *d);

/* Collective: values[0..n) summed over ranks, in place (losses, stop flags). */
hg_status hg_dist_sum(hg_dist *d, double *values, int n);
/* Collective: rank 0's parameters copied to every rank (after loading a checkpoint on
 * rank 0 only). */
hg_status hg_dist_broadcast_params(hg_dist *d);

/* Optimizer state, independent of the number of ranks. Collective: the whole AdamW
 * m and v of parameter `index` (hg_param_at's numel floats each) gathered on rank
 * `root`; other ranks pass NULL. */
hg_status hg_dist_optimizer_get(hg_dist *d, int index, int root, float *m, float *v);
/* Local: sets this rank's part of parameter `index`'s AdamW state from the whole
 * tensors; every rank passes the same tensors (read from one file). */
hg_status hg_dist_optimizer_set(hg_dist *d, int index, const float *m, const float *v);

/* Collective: writes the optimizer file (hg_optimizer_save's format, whole tensors) on
 * rank 0, which alone needs `path`. With zero = 1 rank 0 gathers the slices, holding the
 * whole AdamW state while it writes. hg_optimizer_load reads the file back on any number
 * of ranks, each keeping its slice. Only rank 0's status says whether the write worked. */
hg_status hg_dist_optimizer_save(hg_dist *d, const hg_train_state *st, const char *path);

typedef struct hg_dist_stats {
    int ranks;
    int buckets;              /* gradient buckets per reduction */
    size_t bucket_bytes;      /* hg_dist_options.bucket_bytes */
    size_t optimizer_bytes;   /* AdamW state held by this rank */
    size_t grad_shard_bytes;  /* ZeRO-1's reduced gradient slice on this rank */
    /* the last step: */
    int buckets_done_in_backward; /* reductions seen complete before backward ended */
    double backward_s;        /* from the first bucket's start to the end of backward */
    double exposed_comm_s;    /* waiting on communication after backward (not hidden) */
    double optimizer_s;       /* the update, and for ZeRO-1 the all-gather */
} hg_dist_stats;

hg_dist_stats hg_dist_get_stats(const hg_dist *d);

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* HANDGRAD_DIST_H */
