/* Data parallelism over a communicator: the setup handshake (config hash), the bucketed
 * gradient reduction driven by the model's gradient-ready hook, the optimizer step
 * (replicated, or ZeRO-1 sharded), and optimizer state independent of the rank count.
 *
 * The flat gradient buffer, (P) floats, becomes final from its end downwards (ln_f,
 * the layers from last to first, the embeddings). Final ranges gather into a bucket
 * until it holds bucket_bytes; then its reduction starts while backward goes on. Every
 * rank cuts the same buckets, since the model, P and bucket_bytes are checked equal.
 *
 * ZeRO-1 splits [0, P) into one slice per rank (gpt_shard). A bucket is reduce-scattered
 * with each rank receiving the bucket's intersection with its slice, into gshard, so
 * after the last bucket gshard holds this rank's slice of the summed gradient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/timer.h"
#include "dist/comm.h"
#include "model/gpt.h"
#include "train/checkpoint.h"

typedef struct bucket {
    size_t lo, n;      /* floats of the flat buffer */
    hg_comm_req req;
    int done;
} bucket;

struct hg_dist {
    hg_comm *c;
    hg_model *m;
    hg_dist_options o;
    size_t P;                /* floats in the flat parameter and gradient buffers */
    size_t *shard_lo, *shard_n; /* (ranks) each rank's slice; the whole buffer without ZeRO */
    size_t *counts, *displs; /* (ranks) scratch for a collective's per-rank counts */
    float *gshard;           /* (shard_n[rank]) ZeRO-1: this rank's slice of the summed gradient */
    bucket *buckets;         /* (cap) the reduction in flight */
    int cap, nb;
    size_t bucket_hi, ready_lo; /* the open bucket is [ready_lo, bucket_hi) */
    int armed;               /* the running backward reduces */
    int pending;             /* reduction started, not yet consumed by the optimizer step */
    int solo;                /* one rank without ZeRO-1: nothing to reduce, so no gradient
                                hook (which would keep CUDA graphs off) */
    hg_status hook_status;   /* a failure inside the hook, reported after backward */
    char hook_error[256];
    double t_first, t_backward_end;
    hg_dist_stats stats;
};

hg_dist_options hg_dist_options_default(void) {
    hg_dist_options o = {.zero = 0, .bucket_bytes = (size_t)25 << 20, .timeout_s = 300.0, .global_batch = 0, .config_hash = 0};
    return o;
}

static double timeout(const hg_dist *d) { return d->o.timeout_s; }

static hg_status wait_for(hg_dist *d, hg_comm_req *r, const char *what) { return hg_comm_wait(d->c, r, timeout(d), what); }

/* ---- the handshake ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV0 0xcbf29ce484222325ull
#define HASH(h, x) (h = fnv(h, &(x), sizeof(x)))

/* The running executable's bytes; 0 where /proc/self/exe cannot be read. */
static uint64_t binary_hash(void) {
    FILE *f = fopen("/proc/self/exe", "rb");
    if (!f) return 0;
    unsigned char *buf = malloc(1 << 20);
    uint64_t h = FNV0;
    size_t n;
    while (buf && (n = fread(buf, 1, 1 << 20, f)) > 0) h = fnv(h, buf, n);
    free(buf);
    fclose(f);
    return h;
}

/* Everything that must be equal on every rank (not the rank's own shard index). */
static uint64_t config_hash(const hg_model *m, const hg_dist_options *o) {
    const hg_config *c = &m->cfg;
    const hg_options *p = &m->opt;
    uint64_t h = FNV0;
    HASH(h, c->vocab_size), HASH(h, c->max_seq_len), HASH(h, c->n_layer), HASH(h, c->n_head);
    HASH(h, c->d_model), HASH(h, c->d_ff), HASH(h, c->dropout);
    HASH(h, p->batch), HASH(h, p->seq_len), HASH(h, p->training), HASH(h, p->seed), HASH(h, p->shards);
    HASH(h, p->device), HASH(h, p->precision), HASH(h, p->flags);
    HASH(h, o->zero), HASH(h, o->bucket_bytes), HASH(h, o->config_hash);
    return h;
}

/* This rank's own checks; every rank runs them before the exchange. */
static hg_status check_setup(const hg_comm *c, const hg_model *m, const hg_dist_options *o) {
    if (!m->opt.training) return hg_fail(HG_ERR_INVALID, "data parallel training needs a model created with training=1");
    /* a CUDA model on one rank without ZeRO-1 reduces nothing; ZeRO-1's one-rank
     * collectives are host copies of the gradient and moment slices. Across ranks, NCCL
     * follows the backend's stream (hg_comm_follow_backend), which has not run on GPUs */
    if (m->opt.device != HG_DEVICE_CPU && (c->size > 1 || o->zero))
        return hg_fail(HG_ERR_UNSUPPORTED, "data parallelism with a CUDA model is refused until its NCCL path has run on "
                       "GPUs (docs/cuda.md): run one rank without ZeRO-1, or the CPU");
    if (o->zero != 0 && o->zero != 1) return hg_fail(HG_ERR_INVALID, "zero must be 0 or 1, got %d", o->zero);
    if (o->bucket_bytes < 1024) return hg_fail(HG_ERR_INVALID, "bucket_bytes must be >= 1024, got %zu", o->bucket_bytes);
    if (!(o->timeout_s > 0)) return hg_fail(HG_ERR_INVALID, "timeout_s must be > 0, got %g", o->timeout_s);
    if (o->global_batch < 0) return hg_fail(HG_ERR_INVALID, "global_batch must be >= 0, got %d", o->global_batch);
    if (o->global_batch > 0 && o->global_batch % c->size)
        return hg_fail(HG_ERR_INVALID, "batch %d is not divisible by the %d ranks: use a batch that is a multiple of %d",
                       o->global_batch, c->size, c->size);
    int shards = o->zero ? c->size : 1, shard = o->zero ? c->rank : 0;
    if (m->opt.shards != shards || m->opt.shard != shard)
        return hg_fail(HG_ERR_INVALID, "zero=%d on rank %d of %d needs a model created with shards=%d, shard=%d; it has "
                       "shards=%d, shard=%d", o->zero, c->rank, c->size, shards, shard, m->opt.shards, m->opt.shard);
    return HG_OK;
}

/* One all-gather of (own check status, binary hash, config hash): every rank reports
 * the same failure, or none does. */
static hg_status handshake(hg_comm *c, const hg_model *m, const hg_dist_options *o, hg_status mine, double timeout_s) {
    char mine_msg[512];
    snprintf(mine_msg, sizeof mine_msg, "%s", hg_last_error());
    uint64_t me[3] = {(uint64_t)mine, binary_hash(), config_hash(m, o)};
    uint64_t *all = calloc(3 * (size_t)c->size, sizeof *all);
    if (!all) return hg_fail(HG_ERR_NOMEM, "out of memory for the rank handshake");
    hg_comm_req r = {0};
    hg_status st = c->ops->allgather_u64_start(c, me, 3, all, &r);
    if (st == HG_OK) st = hg_comm_wait(c, &r, timeout_s, "the start-up handshake (config hash exchange)");
    if (st == HG_OK && mine != HG_OK) st = hg_fail(mine, "%s", mine_msg);
    for (int k = 0; st == HG_OK && k < c->size; k++) {
        const uint64_t *x = all + 3 * k;
        if (x[0] != HG_OK)
            st = hg_fail(HG_ERR_INVALID, "rank %d refused the set-up (its own message says why)", k);
        else if (x[1] != all[1])
            st = hg_fail(HG_ERR_INVALID, "rank %d runs a different binary from rank 0 (hash %016llx, rank 0 %016llx): "
                         "run the same handgrad build on every rank", k, (unsigned long long)x[1], (unsigned long long)all[1]);
        else if (x[2] != all[2])
            st = hg_fail(HG_ERR_INVALID, "rank %d has a different model or training config from rank 0 (hash %016llx, "
                         "rank 0 %016llx): start every rank with the same arguments", k, (unsigned long long)x[2],
                         (unsigned long long)all[2]);
    }
    free(all);
    return st;
}

/* ---- the reduction, driven by the hook ---- */

/* The per-rank pieces of the flat range [lo, lo+n) under the shard split. */
static void split(hg_dist *d, size_t lo, size_t n) {
    for (int r = 0; r < d->c->size; r++) {
        size_t a = lo > d->shard_lo[r] ? lo : d->shard_lo[r];
        size_t b = lo + n < d->shard_lo[r] + d->shard_n[r] ? lo + n : d->shard_lo[r] + d->shard_n[r];
        d->counts[r] = b > a ? b - a : 0;
        d->displs[r] = b > a ? a - lo : 0;
    }
}

static hg_status bucket_start(hg_dist *d, size_t lo, size_t n) {
    HG_ASSERT(d->nb < d->cap);
    bucket *b = &d->buckets[d->nb++];
    b->lo = lo, b->n = n, b->done = 0;
    memset(&b->req, 0, sizeof b->req);
    if (d->nb == 1) d->t_first = hg_now();
    float *g = (float *)d->m->grad + lo; /* fp32: bf16 gradients only on one rank */
    if (!d->o.zero) return d->c->ops->allreduce_start(d->c, g, n, &b->req);
    split(d, lo, n);
    int me = d->c->rank;
    size_t a = lo > d->shard_lo[me] ? lo : d->shard_lo[me];
    float *dst = d->gshard + (d->counts[me] ? a - d->shard_lo[me] : 0);
    return d->c->ops->reduce_scatter_start(d->c, g, dst, n, d->counts, &b->req);
}

/* Drives the communication library (MPI progresses only inside its calls). */
static hg_status progress(hg_dist *d) {
    for (int i = 0; i < d->nb; i++) {
        if (d->buckets[i].done) continue;
        HG_TRY(d->c->ops->test(d->c, &d->buckets[i].req, &d->buckets[i].done));
    }
    return HG_OK;
}

static void on_grad_ready(void *ctx, size_t off, size_t count) {
    hg_dist *d = ctx;
    if (!d->armed || d->hook_status != HG_OK) return;
    HG_ASSERT(off + count == d->ready_lo);
    (void)count;
    d->ready_lo = off;
    hg_status st = progress(d);
    if (st == HG_OK && (d->bucket_hi - d->ready_lo >= d->o.bucket_bytes / sizeof(float) || off == 0)) {
        st = bucket_start(d, d->ready_lo, d->bucket_hi - d->ready_lo);
        d->bucket_hi = d->ready_lo;
    }
    if (off == 0) d->t_backward_end = hg_now();
    if (st != HG_OK) {
        d->hook_status = st;
        snprintf(d->hook_error, sizeof d->hook_error, "%s", hg_last_error());
    }
}

hg_status hg_dist_forward_backward(hg_dist *d, const int32_t *tokens, const int32_t *targets, int B, int T,
                                   float grad_scale, int reduce, float *loss) {
    if (!d) return hg_fail(HG_ERR_INVALID, "hg_dist_forward_backward: NULL hg_dist");
    HG_TRY(hg_comm_check(d->c));
    if (d->pending)
        return hg_fail(HG_ERR_STATE, "the gradients were already reduced for this step: call hg_dist_optimizer_step "
                       "before the next forward_backward");
    d->armed = reduce != 0;
    d->nb = 0;
    d->bucket_hi = d->ready_lo = d->P;
    d->hook_status = HG_OK;
    hg_status st = hg_forward_backward(d->m, tokens, targets, B, T, grad_scale, loss);
    d->armed = 0;
    if (d->hook_status != HG_OK) return hg_fail(d->hook_status, "%s", d->hook_error);
    if (st != HG_OK) {
        /* reductions already started cannot be matched any more: the others will time out */
        if (d->nb) d->c->broken = 1;
        return st;
    }
    if (reduce) {
        HG_ASSERT(d->solo || (d->ready_lo == 0 && d->nb > 0));
        d->pending = 1;
        d->stats.buckets = d->nb;
        d->stats.backward_s = d->t_backward_end - d->t_first;
        d->stats.buckets_done_in_backward = 0;
        for (int i = 0; i < d->nb; i++) d->stats.buckets_done_in_backward += d->buckets[i].done;
    }
    return HG_OK;
}

/* ---- the optimizer step ---- */

static hg_status finish_reduction(hg_dist *d) {
    double t0 = hg_now();
    for (int i = 0; i < d->nb; i++) {
        bucket *b = &d->buckets[i];
        if (b->done) continue;
        char what[128];
        snprintf(what, sizeof what, "the gradient reduction of bucket %d of %d (%.1f MB)", i + 1, d->nb, b->n * 4 / 1e6);
        HG_TRY(wait_for(d, &b->req, what));
        b->done = 1;
    }
    d->stats.exposed_comm_s = hg_now() - t0;
    return HG_OK;
}

hg_status hg_dist_optimizer_step(hg_dist *d, const hg_adamw *a, float *grad_norm) {
    if (!d || !a) return hg_fail(HG_ERR_INVALID, "hg_dist_optimizer_step: NULL argument");
    HG_TRY(hg_comm_check(d->c));
    if (!d->pending)
        return hg_fail(HG_ERR_STATE, "no gradient reduction to finish: the last micro-step must be "
                       "hg_dist_forward_backward with reduce=1");
    hg_model *m = d->m;
    hg_backend *be = m->be;
    HG_TRY(finish_reduction(d));
    d->pending = 0;
    double t0 = hg_now();
    float mult = 1.0f / (float)d->c->size; /* the mean of the ranks' gradients */
    if (!d->o.zero) {
        double sumsq;
        be->ops->sumsq(be, m->grad, m->opt.grad_precision, d->P, &sumsq); /* bf16 only on one rank */
        HG_TRY(gpt_adamw_range(m, a, sumsq, mult, 0, d->P, m->grad, m->adam_m, m->adam_v, grad_norm));
    } else {
        double sumsq;
        hg_comm_req r = {0};
        be->ops->sumsq(be, d->gshard, HG_PRECISION_FP32, m->shard_n, &sumsq);
        HG_TRY(d->c->ops->sum_f64_start(d->c, &sumsq, 1, &r));
        HG_TRY(wait_for(d, &r, "the sum of the gradient norm's slices"));
        HG_TRY(gpt_adamw_range(m, a, sumsq, mult, m->shard_lo, m->shard_n, d->gshard, m->adam_m, m->adam_v, grad_norm));
        HG_TRY(d->c->ops->allgather_start(d->c, m->param, d->shard_n, d->shard_lo, &r));
        HG_TRY(wait_for(d, &r, "the all-gather of the updated parameters"));
        /* the other ranks' slices reach the compute copy (AdamW wrote this rank's) */
        gpt_refresh_weights(m, 0, m->shard_lo);
        gpt_refresh_weights(m, m->shard_lo + m->shard_n, d->P - m->shard_lo - m->shard_n);
        HG_TRY(be->ops->sync(be));
    }
    d->stats.optimizer_s = hg_now() - t0;
    return HG_OK;
}

hg_status hg_dist_drop_step(hg_dist *d) {
    if (!d) return hg_fail(HG_ERR_INVALID, "hg_dist_drop_step: NULL hg_dist");
    HG_TRY(hg_comm_check(d->c));
    if (d->pending) HG_TRY(finish_reduction(d));
    d->pending = 0;
    return HG_OK;
}

/* ---- other collectives ---- */

hg_status hg_dist_sum(hg_dist *d, double *values, int n) {
    if (!d || (!values && n)) return hg_fail(HG_ERR_INVALID, "hg_dist_sum: NULL argument");
    if (n < 0) return hg_fail(HG_ERR_INVALID, "hg_dist_sum: n must be >= 0, got %d", n);
    HG_TRY(hg_comm_check(d->c));
    hg_comm_req r = {0};
    HG_TRY(d->c->ops->sum_f64_start(d->c, values, (size_t)n, &r));
    return wait_for(d, &r, "a sum over ranks");
}

hg_status hg_dist_broadcast_params(hg_dist *d) {
    if (!d) return hg_fail(HG_ERR_INVALID, "hg_dist_broadcast_params: NULL hg_dist");
    HG_TRY(hg_comm_check(d->c));
    const size_t chunk = (size_t)1 << 28; /* within MPI's int counts */
    for (size_t lo = 0; lo < d->P; lo += chunk) {
        hg_comm_req r = {0};
        HG_TRY(d->c->ops->broadcast_start(d->c, d->m->param + lo, d->P - lo < chunk ? d->P - lo : chunk, 0, &r));
        HG_TRY(wait_for(d, &r, "the broadcast of rank 0's parameters"));
    }
    gpt_refresh_weights(d->m, 0, d->P);
    return d->m->be->ops->sync(d->m->be);
}

/* ---- optimizer state, independent of the rank count ---- */

static hg_status tensor_range(const hg_dist *d, int index, size_t *lo, size_t *n) {
    if (index < 0 || index >= d->m->params.count)
        return hg_fail(HG_ERR_INVALID, "parameter index %d is out of range [0, %d)", index, d->m->params.count);
    const hg_tensor_spec *s = &d->m->params.specs[index];
    *lo = s->offset / sizeof(float);
    *n = (size_t)s->numel;
    return HG_OK;
}

hg_status hg_dist_optimizer_get(hg_dist *d, int index, int root, float *mo, float *vo) {
    if (!d) return hg_fail(HG_ERR_INVALID, "hg_dist_optimizer_get: NULL hg_dist");
    if (root < 0 || root >= d->c->size) return hg_fail(HG_ERR_INVALID, "root %d is not a rank of %d", root, d->c->size);
    if (d->c->rank == root && (!mo || !vo)) return hg_fail(HG_ERR_INVALID, "hg_dist_optimizer_get: NULL output on the root");
    size_t lo = 0, n = 0;
    HG_TRY(tensor_range(d, index, &lo, &n));
    HG_TRY(hg_comm_check(d->c));
    hg_model *m = d->m;
    if (!d->o.zero) {
        if (d->c->rank != root) return HG_OK;
        HG_TRY(gpt_moments_io(m, m->adam_m, lo, n, mo, 0));
        return gpt_moments_io(m, m->adam_v, lo, n, vo, 0);
    }
    split(d, lo, n);
    int me = d->c->rank;
    size_t a = lo > m->shard_lo ? lo : m->shard_lo, at = d->counts[me] ? a - m->shard_lo : 0;
    float *bufs[2][2] = {{(float *)m->adam_m + at, mo}, {(float *)m->adam_v + at, vo}}; /* fp32 (no bf16 with ZeRO-1) */
    for (int k = 0; k < 2; k++) {
        hg_comm_req r = {0};
        HG_TRY(d->c->ops->gather_start(d->c, bufs[k][0], bufs[k][1], d->counts, d->displs, root, &r));
        HG_TRY(wait_for(d, &r, "the gather of the optimizer state"));
    }
    return HG_OK;
}

hg_status hg_dist_optimizer_set(hg_dist *d, int index, const float *mi, const float *vi) {
    if (!d || !mi || !vi) return hg_fail(HG_ERR_INVALID, "hg_dist_optimizer_set: NULL argument");
    size_t lo = 0, n = 0;
    HG_TRY(tensor_range(d, index, &lo, &n));
    return gpt_moments_set(d->m, index, mi, vi);
}

hg_status hg_dist_optimizer_save(hg_dist *d, const hg_train_state *st, const char *path) {
    if (!d || !st || (d->c->rank == 0 && !path)) return hg_fail(HG_ERR_INVALID, "hg_dist_optimizer_save: NULL argument");
    hg_model *m = d->m;
    if (!d->o.zero) return d->c->rank == 0 ? hg_optimizer_save(m, st, path) : HG_OK;
    /* rank 0 gathers the whole state, one tensor at a time, then writes it */
    float *full = d->c->rank == 0 ? calloc(2, m->train_bytes) : NULL;
    hg_status s = d->c->rank != 0 || full ? HG_OK : hg_fail(HG_ERR_NOMEM, "%s: out of memory gathering the optimizer state", path);
    int failed = s != HG_OK;
    double any = failed;
    HG_TRY(hg_dist_sum(d, &any, 1)); /* all gather, or none */
    if (any > 0) {
        free(full);
        return failed ? s : hg_fail(HG_ERR_NOMEM, "rank 0 could not gather the optimizer state");
    }
    float *mfull = full, *vfull = full ? full + m->train_bytes / sizeof(float) : NULL;
    for (int i = 0; s == HG_OK && i < m->params.count; i++)
        s = hg_dist_optimizer_get(d, i, 0, mfull ? gpt_param(m, mfull, i) : NULL, vfull ? gpt_param(m, vfull, i) : NULL);
    if (s == HG_OK && full) s = ckpt_optimizer_write(m, st, path, mfull, vfull);
    free(full);
    return s;
}

/* ---- lifetime ---- */

void hg_dist_free(hg_dist *d) {
    if (!d) return;
    if (d->c && d->m && d->c->ops->follow && d->m->be->ops->stream) /* the stream may go with the model */
        d->c->ops->follow(d->c, NULL);
    if (d->m && d->m->grad_ready_ctx == d) {
        hg_set_grad_ready_hook(d->m, NULL, NULL);
        d->m->dropout_seed = d->m->opt.seed;
    }
    if (d->gshard) d->m->be->ops->free(d->m->be, d->gshard);
    free(d->shard_lo);
    free(d->buckets);
    free(d);
}

hg_status hg_dist_create(hg_dist **out, hg_comm *c, hg_model *m, const hg_dist_options *o) {
    if (!out || !c || !m || !o) return hg_fail(HG_ERR_INVALID, "hg_dist_create: NULL argument");
    *out = NULL;
    HG_TRY(hg_comm_check(c));
    hg_clear_error();
    /* one rank without ZeRO-1 reduces nothing: frozen parameters are only refused across ranks */
    hg_status mine = m->train_bytes != m->params.bytes && (c->size > 1 || o->zero)
                         ? hg_fail(HG_ERR_UNSUPPORTED, "freeze: data parallelism with frozen parameters (or LoRA adapters) "
                                   "is not implemented; train on one rank without --zero")
                     : m->opt.grad_precision != HG_PRECISION_FP32 && (c->size > 1 || o->zero)
                         ? hg_fail(HG_ERR_UNSUPPORTED, "grad_precision: data parallelism with bf16 gradients is not "
                                   "implemented; use fp32 gradients, or one rank without --zero")
                         : check_setup(c, m, o);
    HG_TRY(handshake(c, m, o, mine, o->timeout_s > 0 ? o->timeout_s : 300.0));

    hg_dist *d = calloc(1, sizeof *d);
    if (!d) return hg_fail(HG_ERR_NOMEM, "out of memory for hg_dist");
    d->c = c, d->m = m, d->o = *o;
    d->P = m->train_bytes / sizeof(float);
    d->cap = m->cfg.n_layer + 2; /* at most one bucket per gradient-ready call */
    d->shard_lo = calloc(4 * (size_t)c->size, sizeof(size_t));
    d->buckets = calloc((size_t)d->cap, sizeof *d->buckets);
    hg_status st = d->shard_lo && d->buckets ? HG_OK : hg_fail(HG_ERR_NOMEM, "out of memory for hg_dist");
    if (st == HG_OK) {
        d->shard_n = d->shard_lo + c->size, d->counts = d->shard_n + c->size, d->displs = d->counts + c->size;
        for (int r = 0; r < c->size; r++) gpt_shard(d->P, m->opt.shards, o->zero ? r : 0, &d->shard_lo[r], &d->shard_n[r]);
    }
    if (st == HG_OK && o->zero) {
        d->gshard = m->be->ops->alloc(m->be, m->shard_n ? m->shard_n * sizeof(float) : HG_ALIGN);
        if (!d->gshard) st = hg_fail(HG_ERR_NOMEM, "out of memory for the gradient slice (%zu bytes)", m->shard_n * sizeof(float));
    }
    /* collectives on a device's buffers start after the kernels queued before them: the
     * communicator follows the backend's stream (one rank without one reduces nothing) */
    d->solo = c->size == 1 && !o->zero;
    if (st == HG_OK && (!d->solo || c->ops->follow)) st = hg_comm_follow_backend(c, m->be);
    /* a rank failing here leaves the others waiting in the broadcast until the timeout */
    if (st == HG_OK) st = hg_dist_broadcast_params(d);
    if (st == HG_OK && !d->solo) st = hg_set_grad_ready_hook(m, on_grad_ready, d);
    if (st != HG_OK) {
        hg_dist_free(d);
        return st;
    }
    /* each rank draws its own dropout masks (rank 0 the same as a single process) */
    m->dropout_seed = m->opt.seed ^ (c->rank ? fnv(FNV0, &c->rank, sizeof c->rank) : 0);
    d->stats.ranks = c->size;
    d->stats.bucket_bytes = o->bucket_bytes;
    d->stats.optimizer_bytes = 2 * m->shard_n * gpt_state_bytes(m);
    d->stats.grad_shard_bytes = o->zero ? m->shard_n * sizeof(float) : 0;
    *out = d;
    return HG_OK;
}

hg_dist_stats hg_dist_get_stats(const hg_dist *d) {
    hg_dist_stats s = {0};
    return d ? d->stats : s;
}
