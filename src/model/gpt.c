/* The model object: building the parameter and activation tables, allocation from them,
 * initialisation, and the parameter API. */
#include "model/gpt.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

/* Largest classifier chunk: (chunk, Vp) floats. 128 MiB holds 667 rows of GPT-2's vocab.
 * Each chunk's dwte += dlogits^T x reads and writes all of dwte, so larger chunks cost
 * less traffic, and its K = chunk runs faster (190-198 GFLOP/s at 256, 205-212 at 512+,
 * bench/kernel_lab_gemm.c). */
#define CLASSIFIER_CHUNK_BYTES ((size_t)128 << 20)

hg_options hg_options_default(void) {
    hg_options o = {.batch = 1, .seq_len = 0, .training = 1, .threads = 0, .seed = 0, .shards = 1, .shard = 0};
    return o;
}

static int add(hg_table *t, const char *name, int ndim, int64_t d0, int64_t d1, int64_t alloc,
               int64_t copies, size_t elem, unsigned flags) {
    int64_t shape[2] = {d0, d1};
    return hg_table_add(t, name, ndim, shape, alloc, copies, elem, flags);
}

/* Adds "h.{layer}.{suffix}" with shape (d0) or (d0, d1). */
static int add_layer(hg_table *t, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1, unsigned flags) {
    char name[64];
    snprintf(name, sizeof name, "h.%d.%s", layer, suffix);
    return add(t, name, ndim, d0, d1, 0, 1, 4, flags) >= 0;
}

/* The parameter table, in Hugging Face order; enum gpt_layer_param follows it. */
static int build_param_table(const hg_config *c, hg_table *t) {
    int64_t C = c->d_model, F = gpt_dff(c), V = c->vocab_size, Vp = gpt_padded_vocab(c);
    if (add(t, "wte.weight", 2, V, C, Vp * C, 1, 4, HG_SPEC_DECAY) < 0) return 0;
    if (add(t, "wpe.weight", 2, c->max_seq_len, C, 0, 1, 4, HG_SPEC_DECAY) < 0) return 0;
    for (int l = 0; l < c->n_layer; l++) {
        if (!add_layer(t, l, "ln_1.weight", 1, C, 1, 0) || !add_layer(t, l, "ln_1.bias", 1, C, 1, 0) ||
            !add_layer(t, l, "attn.c_attn.weight", 2, C, 3 * C, HG_SPEC_DECAY) ||
            !add_layer(t, l, "attn.c_attn.bias", 1, 3 * C, 1, 0) ||
            !add_layer(t, l, "attn.c_proj.weight", 2, C, C, HG_SPEC_DECAY) ||
            !add_layer(t, l, "attn.c_proj.bias", 1, C, 1, 0) || !add_layer(t, l, "ln_2.weight", 1, C, 1, 0) ||
            !add_layer(t, l, "ln_2.bias", 1, C, 1, 0) || !add_layer(t, l, "mlp.c_fc.weight", 2, C, F, HG_SPEC_DECAY) ||
            !add_layer(t, l, "mlp.c_fc.bias", 1, F, 1, 0) ||
            !add_layer(t, l, "mlp.c_proj.weight", 2, F, C, HG_SPEC_DECAY) ||
            !add_layer(t, l, "mlp.c_proj.bias", 1, C, 1, 0))
            return 0;
    }
    return add(t, "ln_f.weight", 1, C, 1, 0, 1, 4, 0) >= 0 && add(t, "ln_f.bias", 1, C, 1, 0, 1, 4, 0) >= 0;
}

/* The activation table; its order must match enum gpt_act. */
static int build_act_table(const hg_config *c, const hg_options *o, int threads, hg_table *t,
                           size_t attention_scratch, int chunk) {
    int64_t C = c->d_model, F = gpt_dff(c), L = c->n_layer, N = (int64_t)o->batch * o->seq_len;
    int64_t Vp = gpt_padded_vocab(c), NH = c->n_head;
    int64_t layers = o->training ? L : 1, bw = o->training ? 1 : 0;
    int64_t wide = F > 3 * C ? F : 3 * C;
    int ok = 1;
    ok &= add(t, "tokens", 1, N, 1, 0, 1, 4, 0) == A_TOKENS;
    ok &= add(t, "targets", 1, N, 1, 0, 1, 4, 0) == A_TARGETS;
    ok &= add(t, "residual", 2, N, C, 0, o->training ? L + 1 : 2, 4, 0) == A_RESIDUAL;
    ok &= add(t, "ln1", 2, N, C, 0, layers, 4, 0) == A_LN1;
    ok &= add(t, "ln1.mean", 1, N, 1, 0, layers, 4, 0) == A_LN1_MEAN;
    ok &= add(t, "ln1.rstd", 1, N, 1, 0, layers, 4, 0) == A_LN1_RSTD;
    ok &= add(t, "qkv", 2, N, 3 * C, 0, layers, 4, 0) == A_QKV;
    ok &= add(t, "atty", 2, N, C, 0, layers, 4, 0) == A_ATTY;
    ok &= add(t, "lse", 2, NH, N, 0, layers, 4, 0) == A_LSE;
    ok &= add(t, "residual2", 2, N, C, 0, layers, 4, 0) == A_RESIDUAL2;
    ok &= add(t, "ln2", 2, N, C, 0, layers, 4, 0) == A_LN2;
    ok &= add(t, "ln2.mean", 1, N, 1, 0, layers, 4, 0) == A_LN2_MEAN;
    ok &= add(t, "ln2.rstd", 1, N, 1, 0, layers, 4, 0) == A_LN2_RSTD;
    ok &= add(t, "fch", 2, N, F, 0, layers, 4, 0) == A_FCH;
    ok &= add(t, "lnf", 2, N, C, 0, 1, 4, 0) == A_LNF;
    ok &= add(t, "lnf.mean", 1, N, 1, 0, 1, 4, 0) == A_LNF_MEAN;
    ok &= add(t, "lnf.rstd", 1, N, 1, 0, 1, 4, 0) == A_LNF_RSTD;
    ok &= add(t, "losses", 1, N, 1, 0, 1, 4, 0) == A_LOSSES;
    ok &= add(t, "kv_cache", 2, gpt_has_kv(o) ? 2 * N : 0, C, 0, L, 4, 0) == A_KV;
    ok &= add(t, "scratch.proj", 2, N, C, 0, 1, 4, 0) == S_PROJ;
    ok &= add(t, "scratch.gelu", 2, N, F, 0, 1, 4, 0) == S_GELU;
    ok &= add(t, "scratch.logits", 2, chunk, Vp, 0, 1, 4, 0) == S_LOGITS;
    ok &= add(t, "scratch.attention", 1, (int64_t)attention_scratch, 1, 0, 1, 1, 0) == S_ATTENTION;
    ok &= add(t, "scratch.dresidual", 2, bw * N, C, 0, 1, 4, 0) == S_DRES;
    ok &= add(t, "scratch.dbranch", 2, c->dropout > 0 ? bw * N : 0, C, 0, 1, 4, 0) == S_DBRANCH;
    ok &= add(t, "scratch.dln", 2, bw * N, C, 0, 1, 4, 0) == S_DLN;
    ok &= add(t, "scratch.datty", 2, bw * N, C, 0, 1, 4, 0) == S_DATTY;
    ok &= add(t, "scratch.dwide", 2, bw * N, wide, 0, 1, 4, 0) == S_DWIDE;
    ok &= add(t, "scratch.reduce", 2, bw * threads, 2 * C, 0, 1, 4, 0) == S_REDUCE;
    return ok;
}

int gpt_has_kv(const hg_options *o) { return !o->training && o->batch == 1; }

static int classifier_chunk(const hg_config *c, int64_t N) {
    int64_t Vp = gpt_padded_vocab(c);
    int64_t max_rows = (int64_t)(CLASSIFIER_CHUNK_BYTES / ((size_t)Vp * sizeof(float)));
    if (max_rows < 16) max_rows = 16;
    int64_t nchunks = (N + max_rows - 1) / max_rows;
    return (int)((N + nchunks - 1) / nchunks);
}

static int resolve_threads(const hg_options *o) { return o->threads > 0 ? o->threads : omp_get_num_procs(); }

hg_status gpt_build_tables(const hg_config *cfg, const hg_options *opt, int threads,
                           hg_table *params, hg_table *acts, int *chunk) {
    int64_t N = (int64_t)opt->batch * opt->seq_len;
    *chunk = classifier_chunk(cfg, N);
    hg_attention_shape as = {opt->batch, opt->seq_len, cfg->n_head, cfg->d_model / cfg->n_head, 1};
    hg_backend probe = {.ops = hg_backend_cpu_ops(), .threads = threads};
    size_t att = probe.ops->attention_scratch_bytes(&probe, &as);
    hg_table_init(params);
    hg_table_init(acts);
    if (!build_param_table(cfg, params) || !build_act_table(cfg, opt, threads, acts, att, *chunk)) {
        hg_table_free(params);
        hg_table_free(acts);
        return hg_fail(HG_ERR_NOMEM, "out of memory building the model's tables");
    }
    hg_table_layout(params);
    hg_table_layout(acts);
    return HG_OK;
}

static hg_status check_options(const hg_config *cfg, const hg_options *o) {
    HG_TRY(hg_config_validate(cfg));
    if (!o) return hg_fail(HG_ERR_INVALID, "options is NULL");
    if (o->batch <= 0 || o->batch > (1 << 20)) return hg_fail(HG_ERR_INVALID, "batch must be in [1, 1048576], got %d", o->batch);
    if (o->seq_len <= 0 || o->seq_len > cfg->max_seq_len)
        return hg_fail(HG_ERR_INVALID, "seq_len must be in [1, max_seq_len=%d], got %d", cfg->max_seq_len, o->seq_len);
    if ((int64_t)o->batch * o->seq_len > (1 << 26))
        return hg_fail(HG_ERR_INVALID, "batch*seq_len = %lld tokens is too many for one step", (long long)o->batch * o->seq_len);
    if (o->threads < 0 || o->threads > 1024) return hg_fail(HG_ERR_INVALID, "threads must be in [0, 1024], got %d", o->threads);
    if (o->training != 0 && o->training != 1) return hg_fail(HG_ERR_INVALID, "training must be 0 or 1, got %d", o->training);
    if (o->shards < 0 || o->shards > 65536) return hg_fail(HG_ERR_INVALID, "shards must be in [0, 65536], got %d", o->shards);
    if (o->shard < 0 || o->shard >= (o->shards > 1 ? o->shards : 1))
        return hg_fail(HG_ERR_INVALID, "shard must be in [0, shards=%d), got %d", o->shards > 1 ? o->shards : 1, o->shard);
    return HG_OK;
}

static hg_options normalised(const hg_config *cfg, const hg_options *opt) {
    hg_options o = *opt;
    if (o.seq_len == 0) o.seq_len = cfg->max_seq_len;
    if (o.shards == 0) o.shards = 1;
    return o;
}

void gpt_shard(size_t P, int shards, int shard, size_t *lo, size_t *n) {
    size_t S = (P + (size_t)shards - 1) / (size_t)shards;
    S = (S + 15) / 16 * 16;
    size_t a = (size_t)shard * S < P ? (size_t)shard * S : P;
    *lo = a;
    *n = P - a < S ? P - a : S;
}

hg_status hg_memory_required(const hg_config *cfg, const hg_options *opt_in, hg_memory_plan *out) {
    if (!cfg || !opt_in || !out) return hg_fail(HG_ERR_INVALID, "hg_memory_required: NULL argument");
    hg_options opt = normalised(cfg, opt_in);
    HG_TRY(check_options(cfg, &opt));
    hg_table p, a;
    int chunk;
    HG_TRY(gpt_build_tables(cfg, &opt, resolve_threads(&opt), &p, &a, &chunk));
    memset(out, 0, sizeof *out);
    out->params = p.bytes;
    if (opt.training) {
        size_t lo, n;
        gpt_shard(p.bytes / sizeof(float), opt.shards, opt.shard, &lo, &n);
        out->grads = p.bytes;
        out->optimizer = 2 * n * sizeof(float);
    }
    for (int i = 0; i < a.count; i++) {
        const hg_tensor_spec *s = &a.specs[i];
        size_t bytes = (size_t)s->alloc * s->copies * s->elem_size;
        if (!strncmp(s->name, "scratch.", 8)) out->scratch += bytes;
        else out->activations += bytes;
    }
    out->total = a.bytes + out->params + out->grads + out->optimizer;
    hg_table_free(&p);
    hg_table_free(&a);
    return HG_OK;
}

/* GPT-2 initialisation, element by element from the counter-based RNG, so the result
 * does not depend on the thread count. */
static void init_params(hg_model *m) {
    const hg_config *c = &m->cfg;
    float proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
    for (int i = 0; i < m->params.count; i++) {
        const hg_tensor_spec *s = &m->params.specs[i];
        float *p = gpt_param(m, m->param, i);
        int is_bias = strstr(s->name, ".bias") != NULL;
        int is_ln = strstr(s->name, "ln_") != NULL;
        int is_proj = strstr(s->name, "c_proj.weight") != NULL;
        float std = is_proj ? proj_std : 0.02f;
        uint64_t seed = m->opt.seed;
        #pragma omp parallel for schedule(static) num_threads(m->threads)
        for (int64_t j = 0; j < s->numel; j++)
            p[j] = is_ln && !is_bias ? 1.0f : is_bias ? 0.0f : std * hg_rng_normal(seed, (uint32_t)i, (uint64_t)j);
    }
}

void hg_model_free(hg_model *m) {
    if (!m) return;
    if (m->be) {
        void *bufs[] = {m->param, m->grad, m->adam_m, m->adam_v, m->act};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) m->be->ops->free(m->be, bufs[i]);
        m->be->ops->destroy(m->be);
    }
    hg_table_free(&m->params);
    hg_table_free(&m->acts);
    free(m->host_losses);
    free(m);
}

hg_status hg_model_create(hg_model **out, const hg_config *cfg, const hg_options *opt_in) {
    if (!out || !cfg || !opt_in) return hg_fail(HG_ERR_INVALID, "hg_model_create: NULL argument");
    *out = NULL;
    hg_options opt = normalised(cfg, opt_in);
    hg_memory_plan plan;
    HG_TRY(hg_memory_required(cfg, &opt, &plan));
    size_t avail = hg_memory_available();
    if (plan.total > avail)
        return hg_fail(HG_ERR_NOMEM, "model needs %.2f GiB (params %.2f, grads+optimizer %.2f, activations %.2f, "
                       "scratch %.2f) but only %.2f GiB is available",
                       plan.total / 1073741824.0, plan.params / 1073741824.0,
                       (plan.grads + plan.optimizer) / 1073741824.0, plan.activations / 1073741824.0,
                       plan.scratch / 1073741824.0, avail / 1073741824.0);
    hg_model *m = calloc(1, sizeof *m);
    if (!m) return hg_fail(HG_ERR_NOMEM, "out of memory for the model struct");
    m->cfg = *cfg;
    m->opt = opt;
    m->F = gpt_dff(cfg);
    m->Vp = gpt_padded_vocab(cfg);
    m->hs = cfg->d_model / cfg->n_head;
    m->threads = resolve_threads(&opt);
    m->opt.threads = m->threads;
    m->plan = plan;
    m->train_mode = opt.training;
    m->dropout_seed = opt.seed;
    m->host_losses = malloc(sizeof(float) * (size_t)opt.batch * opt.seq_len);
    hg_status st = m->host_losses ? HG_OK : hg_fail(HG_ERR_NOMEM, "out of memory for the loss buffer");
    if (st == HG_OK) st = gpt_build_tables(cfg, &opt, m->threads, &m->params, &m->acts, &m->chunk);
    if (st == HG_OK) st = hg_backend_cpu_create(&m->be, m->threads);
    if (st != HG_OK) {
        hg_model_free(m);
        return st;
    }
    hg_backend *be = m->be;
    gpt_shard(m->params.bytes / sizeof(float), opt.shards, opt.shard, &m->shard_lo, &m->shard_n);
    float **bufs[] = {&m->param, &m->grad, &m->adam_m, &m->adam_v};
    size_t sizes[] = {m->params.bytes, m->params.bytes, m->shard_n * sizeof(float), m->shard_n * sizeof(float)};
    int nbufs = opt.training ? 4 : 1;
    for (int i = 0; i < nbufs && st == HG_OK; i++) {
        *bufs[i] = be->ops->alloc(be, sizes[i] ? sizes[i] : HG_ALIGN);
        if (!*bufs[i]) st = hg_fail(HG_ERR_NOMEM, "out of memory allocating %zu bytes of parameters", sizes[i]);
        else be->ops->zero(be, *bufs[i], sizes[i]);
    }
    if (st == HG_OK) {
        m->act = be->ops->alloc(be, m->acts.bytes);
        if (!m->act) st = hg_fail(HG_ERR_NOMEM, "out of memory allocating %zu bytes of activations", m->acts.bytes);
        else be->ops->zero(be, m->act, m->acts.bytes);
    }
    if (st != HG_OK) {
        hg_model_free(m);
        return st;
    }
    init_params(m);
    *out = m;
    return HG_OK;
}

const hg_config *hg_model_config(const hg_model *m) { return &m->cfg; }
const hg_options *hg_model_options(const hg_model *m) { return &m->opt; }
hg_memory_plan hg_model_memory(const hg_model *m) { return m->plan; }

int hg_buffer_count(const hg_model *m) { return m ? m->acts.count : 0; }

hg_status hg_buffer_at(const hg_model *m, int index, hg_buffer_info *out) {
    if (!m || !out) return hg_fail(HG_ERR_INVALID, "hg_buffer_at: NULL argument");
    if (index < 0 || index >= m->acts.count)
        return hg_fail(HG_ERR_INVALID, "buffer index %d is out of range [0, %d)", index, m->acts.count);
    const hg_tensor_spec *s = &m->acts.specs[index];
    *out = (hg_buffer_info){.name = s->name, .scratch = !strncmp(s->name, "scratch.", 8), .copies = s->copies,
                            .bytes = (size_t)s->alloc * s->elem_size * (size_t)s->copies};
    return HG_OK;
}

size_t hg_model_workspace_bytes(const hg_model *m) { return m ? m->be->ops->workspace_bytes(m->be) : 0; }

int hg_param_count(const hg_model *m) { return m ? m->params.count : 0; }

hg_status hg_param_at(const hg_model *m, int index, hg_param_info *out) {
    if (!m || !out) return hg_fail(HG_ERR_INVALID, "hg_param_at: NULL argument");
    if (index < 0 || index >= m->params.count)
        return hg_fail(HG_ERR_INVALID, "parameter index %d is out of range [0, %d)", index, m->params.count);
    const hg_tensor_spec *s = &m->params.specs[index];
    memset(out, 0, sizeof *out);
    out->name = s->name;
    out->ndim = s->ndim;
    for (int d = 0; d < s->ndim; d++) out->shape[d] = s->shape[d];
    out->numel = s->numel;
    out->data = gpt_param(m, m->param, index);
    if (m->grad) out->grad = gpt_param(m, m->grad, index);
    if (m->grad && m->opt.shards == 1) {
        out->adam_m = gpt_param(m, m->adam_m, index);
        out->adam_v = gpt_param(m, m->adam_v, index);
    }
    out->decay = (s->flags & HG_SPEC_DECAY) != 0;
    return HG_OK;
}

hg_status hg_param_find(const hg_model *m, const char *name, hg_param_info *out) {
    if (!m || !name) return hg_fail(HG_ERR_INVALID, "hg_param_find: NULL argument");
    int i = hg_table_find(&m->params, name);
    if (i < 0) return hg_fail(HG_ERR_INVALID, "no parameter named '%s'", name);
    return hg_param_at(m, i, out);
}

void gpt_moments_set(hg_model *m, int i, const float *mo, const float *vo) {
    const hg_tensor_spec *s = &m->params.specs[i];
    size_t lo = s->offset / sizeof(float), hi = lo + (size_t)s->numel;
    size_t a = lo > m->shard_lo ? lo : m->shard_lo, b = hi < m->shard_lo + m->shard_n ? hi : m->shard_lo + m->shard_n;
    if (b <= a) return;
    m->be->ops->upload(m->be, m->adam_m + (a - m->shard_lo), mo + (a - lo), (b - a) * sizeof(float));
    m->be->ops->upload(m->be, m->adam_v + (a - m->shard_lo), vo + (a - lo), (b - a) * sizeof(float));
}

hg_status hg_set_grad_ready_hook(hg_model *m, hg_grad_ready_fn *fn, void *ctx) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_set_grad_ready_hook: NULL model");
    if (fn && !m->opt.training) return hg_fail(HG_ERR_STATE, "this model was created with training=0: it has no backward");
    m->grad_ready = fn;
    m->grad_ready_ctx = fn ? ctx : NULL;
    return HG_OK;
}

hg_status hg_model_copy_params(hg_model *dst, const hg_model *src) {
    if (!dst || !src) return hg_fail(HG_ERR_INVALID, "hg_model_copy_params: NULL model");
    const hg_config *a = &dst->cfg, *b = &src->cfg;
    if (a->vocab_size != b->vocab_size || a->max_seq_len != b->max_seq_len || a->n_layer != b->n_layer ||
        a->n_head != b->n_head || a->d_model != b->d_model || dst->F != src->F)
        return hg_fail(HG_ERR_INVALID, "hg_model_copy_params: the models' configs differ (V %d/%d, Tmax %d/%d, L %d/%d, "
                       "NH %d/%d, C %d/%d, F %d/%d)", a->vocab_size, b->vocab_size, a->max_seq_len, b->max_seq_len,
                       a->n_layer, b->n_layer, a->n_head, b->n_head, a->d_model, b->d_model, dst->F, src->F);
    /* Same config, same parameter table: one copy. Both models live on the CPU backend,
     * whose download is a host copy; a device backend will need a device-to-device op. */
    src->be->ops->download(src->be, dst->param, src->param, src->params.bytes);
    dst->kv_len = 0; /* the cache held keys of the old weights */
    return HG_OK;
}

hg_status hg_set_train_mode(hg_model *m, int on) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_set_train_mode: NULL model");
    if (on && !m->opt.training) return hg_fail(HG_ERR_STATE, "train mode needs a model created with training=1");
    m->train_mode = on != 0;
    return HG_OK;
}

uint64_t hg_model_rng_counter(const hg_model *m) { return m->rng_step; }

hg_status hg_model_set_rng_counter(hg_model *m, uint64_t counter) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_model_set_rng_counter: NULL model");
    if (counter > UINT32_MAX) return hg_fail(HG_ERR_INVALID, "rng counter %llu is out of range", (unsigned long long)counter);
    m->rng_step = (uint32_t)counter;
    return HG_OK;
}
