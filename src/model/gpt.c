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

hg_options hg_options_default(void) {
    hg_options o = {.batch = 1, .seq_len = 0, .training = 1, .threads = 0, .seed = 0,
                    .device = HG_DEVICE_CPU, .precision = HG_PRECISION_FP32, .flags = 0, .shards = 1, .shard = 0};
    return o;
}

static int add(hg_table *t, const char *name, int ndim, int64_t d0, int64_t d1, int64_t alloc,
               int64_t copies, size_t elem, unsigned flags) {
    int64_t shape[2] = {d0, d1};
    return hg_table_add(t, name, ndim, shape, alloc, copies, elem, flags);
}

/* What each role's tensors are (core/table.h); every matrix also gets HG_SPEC_DECAY, and
 * an untied wte HG_SPEC_LOOKUP. Init, AdamW, the weight copy and the counts read these. */
static const unsigned role_flags[GPT_ROLES] = {
    [R_WPE] = HG_SPEC_POSITION | HG_SPEC_LOOKUP,
    [R_SITE_FINAL] = HG_SPEC_SITE, [R_SITE_ATTN] = HG_SPEC_SITE, [R_SITE_MLP] = HG_SPEC_SITE,
    [R_LN1_W] = HG_SPEC_NORM, [R_LN2_W] = HG_SPEC_NORM, [R_LNF_W] = HG_SPEC_NORM,
    [R_POST1_W] = HG_SPEC_NORM, [R_POST2_W] = HG_SPEC_NORM,
    [R_POST1_B] = HG_SPEC_NORM | HG_SPEC_BIAS, [R_POST2_B] = HG_SPEC_NORM | HG_SPEC_BIAS,
    [R_QNORM_W] = HG_SPEC_NORM, [R_KNORM_W] = HG_SPEC_NORM,
    [R_LN1_B] = HG_SPEC_NORM | HG_SPEC_BIAS, [R_LN2_B] = HG_SPEC_NORM | HG_SPEC_BIAS,
    [R_LNF_B] = HG_SPEC_NORM | HG_SPEC_BIAS,
    [R_QKV_B] = HG_SPEC_BIAS, [R_LM_HEAD_B] = HG_SPEC_BIAS, [R_PROJ_B] = HG_SPEC_BIAS, [R_FC_B] = HG_SPEC_BIAS, [R_FCPROJ_B] = HG_SPEC_BIAS,
    [R_PROJ_W] = HG_SPEC_RESIDUAL, [R_FCPROJ_W] = HG_SPEC_RESIDUAL,
};

/* Element sizes of a parameter table: E bytes, and En for the norms' tensors (4 and 4 for
 * the fp32 buffers; the compute and the residual type's for the weight copy). */
typedef struct param_elems {
    size_t E, En;
} param_elems;

/* Adds parameter `name` (prefixed "h.{layer}." for a block's) with shape (d0) or (d0, d1),
 * its role and the role's flags (plus `extra`). alloc: elements reserved (0: numel). */
static int add_param_flags(hg_table *t, param_elems pe, int layer, gpt_role role, const char *name, int ndim,
                           int64_t d0, int64_t d1, int64_t alloc, unsigned extra) {
    char full[80];
    if (layer >= 0) snprintf(full, sizeof full, "h.%d.%s", layer, name);
    else snprintf(full, sizeof full, "%s", name);
    HG_ASSERT(strlen(full) < sizeof t->specs->name); /* the longest, a site op's "h.4095.<31>.<23>", fits */
    unsigned flags = role_flags[role] | extra | (ndim == 2 ? HG_SPEC_DECAY : 0);
    int i = add(t, full, ndim, d0, d1, alloc, 1, flags & HG_SPEC_NORM ? pe.En : pe.E, flags);
    if (i >= 0) t->specs[i].layer = layer, t->specs[i].role = role;
    return i >= 0;
}
static int add_param(hg_table *t, param_elems pe, int layer, gpt_role role, const char *name, int ndim, int64_t d0,
                     int64_t d1, int64_t alloc) {
    return add_param_flags(t, pe, layer, role, name, ndim, d0, d1, alloc, 0);
}

/* Site s's op parameters in block `layer` (-1: model-wide), named "[h.{l}.]{op}.{param}". */
static int add_site_params(hg_table *t, param_elems pe, const gpt_sites *st, hg_site s, int layer, gpt_role role) {
    if (!st->on[s]) return 1;
    const gpt_site_def *d = &st->def[s];
    int ok = 1;
    for (int i = 0; ok && i < d->op.n_params; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.%s", d->name, d->param_name[i]);
        const int64_t *sh = st->z[s].param[i];
        ok = add_param(t, pe, layer, role, name, sh[1] ? 2 : 1, sh[0], sh[1] ? sh[1] : 1, 0);
    }
    return ok;
}

/* The parameter table from the description, in the order gpt_role documents. The
 * embedding and output matrices reserve Vp rows for the classifier's padded vocabulary.
 * The one place that says which parameters a config has: the model's tables, the counts
 * (hg_config_param_count, hg_train_flops) and the Hugging Face names all follow it. */
static int build_param_table(const hg_config *c, const gpt_sites *st, hg_table *t, param_elems pe) {
    gpt_dims d = gpt_dims_of(c);
    int64_t C = d.C;
    int nw = gpt_has_norm_weight(c), nb = gpt_has_norm_bias(c), qn = c->qk_norm && nw;
    int n1 = gpt_has_ln1(c), n2 = gpt_has_ln2(c), np = gpt_has_post_norm(c);
    int ok = add_param_flags(t, pe, -1, R_WTE, "wte.weight", 2, d.V, C, (int64_t)d.Vp * C, c->untied ? HG_SPEC_LOOKUP : 0);
    if (c->position == HG_POS_LEARNED) ok = ok && add_param(t, pe, -1, R_WPE, "wpe.weight", 2, c->max_seq_len, C, 0);
    for (int l = 0; ok && l < d.L; l++) {
        ok = (!(n1 && nw) || add_param(t, pe, l, R_LN1_W, "ln_1.weight", 1, C, 1, 0)) &&
             (!(n1 && nb) || add_param(t, pe, l, R_LN1_B, "ln_1.bias", 1, C, 1, 0)) &&
             add_param(t, pe, l, R_QKV_W, "attn.c_attn.weight", 2, C, d.QKV, 0) &&
             (c->omit & HG_OMIT_QKV_BIAS || add_param(t, pe, l, R_QKV_B, "attn.c_attn.bias", 1, d.QKV, 1, 0)) &&
             (!qn || add_param(t, pe, l, R_QNORM_W, "attn.q_norm.weight", 1, c->qk_norm_whole ? d.QD : d.hs, 1, 0)) &&
             (!qn || add_param(t, pe, l, R_KNORM_W, "attn.k_norm.weight", 1, c->qk_norm_whole ? d.KVD : d.hs, 1, 0)) &&
             add_param(t, pe, l, R_PROJ_W, "attn.c_proj.weight", 2, d.QD, C, 0) &&
             (c->omit & HG_OMIT_PROJ_BIAS || add_param(t, pe, l, R_PROJ_B, "attn.c_proj.bias", 1, C, 1, 0)) &&
             add_site_params(t, pe, st, HG_SITE_ATTN_PROJ, l, R_SITE_ATTN) &&
             (!(np && nw) || add_param(t, pe, l, R_POST1_W, "attn.post_norm.weight", 1, C, 1, 0)) &&
             (!(np && nb) || add_param(t, pe, l, R_POST1_B, "attn.post_norm.bias", 1, C, 1, 0)) &&
             (!(n2 && nw) || add_param(t, pe, l, R_LN2_W, "ln_2.weight", 1, C, 1, 0)) &&
             (!(n2 && nb) || add_param(t, pe, l, R_LN2_B, "ln_2.bias", 1, C, 1, 0)) &&
             add_param(t, pe, l, R_FC_W, "mlp.c_fc.weight", 2, C, d.FI, 0) &&
             (c->omit & HG_OMIT_MLP_BIAS || add_param(t, pe, l, R_FC_B, "mlp.c_fc.bias", 1, d.FI, 1, 0)) &&
             add_site_params(t, pe, st, HG_SITE_MLP_ACT, l, R_SITE_MLP) &&
             add_param(t, pe, l, R_FCPROJ_W, "mlp.c_proj.weight", 2, d.F, C, 0) &&
             (c->omit & HG_OMIT_MLP_BIAS || add_param(t, pe, l, R_FCPROJ_B, "mlp.c_proj.bias", 1, C, 1, 0)) &&
             (!(np && nw) || add_param(t, pe, l, R_POST2_W, "mlp.post_norm.weight", 1, C, 1, 0)) &&
             (!(np && nb) || add_param(t, pe, l, R_POST2_B, "mlp.post_norm.bias", 1, C, 1, 0));
    }
    ok = ok && add_site_params(t, pe, st, HG_SITE_FINAL_NORM, -1, R_SITE_FINAL);
    ok = ok && (!nw || add_param(t, pe, -1, R_LNF_W, "ln_f.weight", 1, C, 1, 0));
    ok = ok && (!nb || add_param(t, pe, -1, R_LNF_B, "ln_f.bias", 1, C, 1, 0));
    if (c->untied) ok = ok && add_param(t, pe, -1, R_LM_HEAD, "lm_head.weight", 2, d.V, C, (int64_t)d.Vp * C);
    if (c->lm_head_bias) ok = ok && add_param(t, pe, -1, R_LM_HEAD_B, "lm_head.bias", 1, d.V, 1, d.Vp);
    return ok;
}

/* Elements of cfg's parameters whose flags have none of `skip` (its registered site
 * ops' included); -1 when out of memory. */
static int64_t param_numel(const hg_config *cfg, unsigned skip) {
    gpt_sites st;
    gpt_sites_registered(cfg, &st);
    hg_table t;
    hg_table_init(&t);
    int64_t n = -1;
    if (build_param_table(cfg, &st, &t, (param_elems){4, 4})) {
        n = 0;
        for (int i = 0; i < t.count; i++)
            if (!(t.specs[i].flags & skip)) n += t.specs[i].numel;
    }
    hg_table_free(&t);
    return n;
}

int64_t hg_config_param_count(const hg_config *c, int with_position_embedding) {
    return param_numel(c, with_position_embedding ? 0 : HG_SPEC_POSITION);
}

/* A lookup's rows (wpe, an untied wte) cost no FLOPs; a site op's FLOPs are its own. */
double hg_train_flops(const hg_config *c, int B, int T) {
    double tokens = (double)B * T, n = (double)param_numel(c, HG_SPEC_LOOKUP | HG_SPEC_SITE);
    gpt_dims d = gpt_dims_of(c);
    return 6.0 * n * tokens + 12.0 * c->n_layer * (double)d.QD * (double)T * tokens;
}

gpt_param_map gpt_param_map_of(const hg_table *t) {
    gpt_param_map pm;
    for (int r = 0; r < GPT_ROLES; r++) pm.at[r] = -1;
    pm.layer0 = t->count;
    pm.per_layer = 0;
    for (int i = 0; i < t->count; i++) {
        const hg_tensor_spec *s = &t->specs[i];
        if (s->layer < 0) {
            if (pm.at[s->role] < 0) pm.at[s->role] = i;
        } else if (s->layer == 0) {
            if (pm.layer0 > i) pm.layer0 = i;
            if (pm.at[s->role] < 0) pm.at[s->role] = i - pm.layer0;
            pm.per_layer++;
        }
    }
    return pm;
}

/* The activation table; its order must match enum gpt_act. E is the compute type's size,
 * Er the residual type's (the residual stream and its gradient); statistics, ids, losses
 * and the rotary table are 4 bytes; the two op scratches are sized in bytes. */
static int build_act_table(const hg_config *c, const hg_options *o, const gpt_sites *st, hg_table *t, size_t E,
                           size_t Er, size_t attention_scratch, size_t reduce_scratch, int chunk) {
    gpt_dims d = gpt_dims_of(c);
    int64_t C = d.C, L = d.L, N = (int64_t)o->batch * o->seq_len;
    int64_t layers = o->training ? L : 1, bw = o->training ? 1 : 0, ln = c->norm == HG_NORM_LAYERNORM;
    int64_t wide = d.FI > d.QKV ? d.FI : d.QKV, rope = c->position == HG_POS_ROPE, qn = c->qk_norm != 0;
    int64_t n1 = gpt_has_ln1(c), n2 = gpt_has_ln2(c), np = gpt_has_post_norm(c);
    /* a postnorm block in bf16 on the CPU keeps its branches' inputs in the compute type
     * where the norms' outputs would be (gpt_step.c: plain_input) */
    int64_t copies_in = c->block == HG_BLOCK_POSTNORM && Er != E;
    int ok = 1;
    ok &= add(t, "tokens", 1, N, 1, 0, 1, 4, 0) == A_TOKENS;
    ok &= add(t, "targets", 1, N, 1, 0, 1, 4, 0) == A_TARGETS;
    ok &= add(t, "residual", 2, N, C, 0, o->training ? L + 1 : 2, Er, 0) == A_RESIDUAL;
    ok &= add(t, "ln1", 2, (n1 || copies_in) * N, C, 0, layers, E, 0) == A_LN1;
    ok &= add(t, "ln1.mean", 1, n1 * ln * N, 1, 0, layers, 4, 0) == A_LN1_MEAN;
    ok &= add(t, "ln1.rstd", 1, n1 * N, 1, 0, layers, 4, 0) == A_LN1_RSTD;
    ok &= add(t, "qkv", 2, N, d.QKV, 0, layers, E, 0) == A_QKV;
    ok &= add(t, "qk_raw", 2, qn * bw * N, d.QD + d.KVD, 0, layers, E, 0) == A_QK_RAW;
    ok &= add(t, "qk_rstd", 2, qn * N, c->qk_norm_whole ? 2 : d.NH + d.NKV, 0, layers, 4, 0) == A_QK_RSTD;
    ok &= add(t, "atty", 2, N, d.QD, 0, layers, E, 0) == A_ATTY;
    ok &= add(t, "lse", 2, d.NH, N, 0, layers, 4, 0) == A_LSE;
    ok &= add(t, "residual2", 2, N, C, 0, layers, Er, 0) == A_RESIDUAL2;
    ok &= add(t, "ln2", 2, (n2 || copies_in) * N, C, 0, layers, E, 0) == A_LN2;
    ok &= add(t, "ln2.mean", 1, n2 * ln * N, 1, 0, layers, 4, 0) == A_LN2_MEAN;
    ok &= add(t, "ln2.rstd", 1, n2 * N, 1, 0, layers, 4, 0) == A_LN2_RSTD;
    ok &= add(t, "fch", 2, N, d.FI, 0, layers, E, 0) == A_FCH;
    ok &= add(t, "post1", 2, np * N, C, 0, layers, E, 0) == A_POST1;
    ok &= add(t, "post1.mean", 1, np * ln * N, 1, 0, layers, 4, 0) == A_POST1_MEAN;
    ok &= add(t, "post1.rstd", 1, np * N, 1, 0, layers, 4, 0) == A_POST1_RSTD;
    ok &= add(t, "post2", 2, np * N, C, 0, layers, E, 0) == A_POST2;
    ok &= add(t, "post2.mean", 1, np * ln * N, 1, 0, layers, 4, 0) == A_POST2_MEAN;
    ok &= add(t, "post2.rstd", 1, np * N, 1, 0, layers, 4, 0) == A_POST2_RSTD;
    ok &= add(t, "lnf", 2, N, C, 0, 1, E, 0) == A_LNF;
    ok &= add(t, "lnf.mean", 1, ln * N, 1, 0, 1, 4, 0) == A_LNF_MEAN;
    ok &= add(t, "lnf.rstd", 1, N, 1, 0, 1, 4, 0) == A_LNF_RSTD;
    ok &= add(t, "losses", 1, N, 1, 0, 1, 4, 0) == A_LOSSES;
    ok &= add(t, "kv_cache", 2, gpt_has_kv(o) ? 2 * N : 0, d.KVD, 0, L, E, 0) == A_KV;
    ok &= add(t, "rope", 2, rope * c->max_seq_len, d.rot, 0, 1, 4, 0) == A_ROPE;
    ok &= add(t, "scratch.proj", 2, N, C, 0, 1, E, 0) == S_PROJ;
    ok &= add(t, "scratch.post", 2, np * N, C, 0, 1, E, 0) == S_POST;
    ok &= add(t, "scratch.act", 2, N, d.F, 0, 1, E, 0) == S_ACT;
    ok &= add(t, "scratch.logits", 2, chunk, d.Vp, 0, 1, E, 0) == S_LOGITS;
    ok &= add(t, "scratch.attention", 1, (int64_t)attention_scratch, 1, 0, 1, 1, 0) == S_ATTENTION;
    ok &= add(t, "scratch.dresidual", 2, bw * N, C, 0, 1, Er, 0) == S_DRES;
    /* a branch's gradient apart from dres: under dropout, or in the compute type */
    ok &= add(t, "scratch.dbranch", 2, c->dropout > 0 || Er != E ? bw * N : 0, C, 0, 1, E, 0) == S_DBRANCH;
    ok &= add(t, "scratch.dln", 2, bw * N, C, 0, 1, E, 0) == S_DLN;
    ok &= add(t, "scratch.datty", 2, bw * N, d.QD, 0, 1, E, 0) == S_DATTY;
    ok &= add(t, "scratch.dwide", 2, bw * N, wide, 0, 1, E, 0) == S_DWIDE;
    int64_t dact = c->mlp != HG_MLP_GELU || st->on[HG_SITE_MLP_ACT];
    ok &= add(t, "scratch.dact", 2, dact * bw * N, d.F, 0, 1, E, 0) == S_DACT;
    ok &= add(t, "scratch.dpost", 2, np * bw * N, C, 0, 1, E, 0) == S_DPOST;
    ok &= add(t, "scratch.reduce", 1, bw * (int64_t)reduce_scratch, 1, 0, 1, 1, 0) == S_REDUCE;
    int64_t on_attn = st->on[HG_SITE_ATTN_PROJ], on_final = st->on[HG_SITE_FINAL_NORM];
    ok &= add(t, "site.attn_proj.in", 2, on_attn * N, C, 0, layers, E, 0) == A_SITE_IN;
    ok &= add(t, "site.final_norm.out", 2, on_final * N, C, 0, 1, E, 0) == A_SITE_OUT;
    ok &= add(t, "scratch.site_grad", 2, (on_attn || on_final) * bw * N, C, 0, 1, E, 0) == S_SITE_GRAD;
    for (int s = 0; s < HG_SITES; s++) { /* named after the config field, less its "op_" */
        char name[64];
        snprintf(name, sizeof name, "scratch.site.%s", hg_site_field((hg_site)s) + 3);
        ok &= add(t, name, 1, st->on[s] ? st->z[s].scratch_bytes : 0, 1, 0, 1, 1, 0) == S_SITE_SCRATCH + s;
    }
    for (int s = 0; s < HG_SITES; s++)
        for (int k = 0; k < HG_OP_MAX_TENSORS; k++) {
            char name[64];
            snprintf(name, sizeof name, "site.%s.saved%d", hg_site_field((hg_site)s) + 3, k);
            int64_t n = st->on[s] ? st->z[s].saved[k] : 0, copies = s == HG_SITE_FINAL_NORM ? 1 : layers;
            ok &= add(t, name, 1, n, 1, 0, copies, 4, 0) == A_SITE_SAVED + s * HG_OP_MAX_TENSORS + k;
        }
    return ok;
}

int gpt_has_kv(const hg_options *o) { return !o->training && o->batch == 1; }

/* Rows per classifier chunk: as many as the backend's chunk budget holds, balanced. */
static int classifier_chunk(const hg_config *c, int64_t N, size_t budget, size_t E) {
    int64_t Vp = gpt_dims_of(c).Vp;
    int64_t max_rows = (int64_t)(budget / ((size_t)Vp * E));
    if (max_rows < 16) max_rows = 16;
    int64_t nchunks = (N + max_rows - 1) / max_rows;
    return (int)((N + nchunks - 1) / nchunks);
}

static int resolve_threads(const hg_options *o) { return o->threads > 0 ? o->threads : omp_get_num_procs(); }

/* The op entries a config needs, each with the config field (or option) that needs it:
 * the first missing one refuses the model, naming it. */
typedef struct op_need {
    const char *field; /* what to change: a config field or an option */
    size_t entry, alt; /* offsetof(hg_backend_ops, entry), and of an entry that does its work
                          fused (0: none) */
    const char *op;
    int (*when)(const hg_config *c, const hg_options *o);
} op_need;

static int always(const hg_config *c, const hg_options *o) { return (void)c, (void)o, 1; }
static int training(const hg_config *c, const hg_options *o) { return (void)c, o->training; }
static int kv_cache(const hg_config *c, const hg_options *o) { return (void)c, gpt_has_kv(o); }
static int qk_norm(const hg_config *c, const hg_options *o) { return (void)o, c->qk_norm != 0; }
static int qk_norm_training(const hg_config *c, const hg_options *o) { return c->qk_norm && o->training; }
static int rope(const hg_config *c, const hg_options *o) { return (void)o, c->position == HG_POS_ROPE; }
static int rope_training(const hg_config *c, const hg_options *o) { return c->position == HG_POS_ROPE && o->training; }
static int gated(const hg_config *c, const hg_options *o) { return (void)o, c->mlp != HG_MLP_GELU; }
static int gated_training(const hg_config *c, const hg_options *o) { return c->mlp != HG_MLP_GELU && o->training; }
static int gelu(const hg_config *c, const hg_options *o) { return (void)o, c->mlp == HG_MLP_GELU; }
static int gelu_training(const hg_config *c, const hg_options *o) { return c->mlp == HG_MLP_GELU && o->training; }
static int dropout(const hg_config *c, const hg_options *o) { return c->dropout > 0 && o->training; }
/* a residual add with no norm after it: the postnorm's, the parallel block's first */
static int plain_add(const hg_config *c, const hg_options *o) {
    return (void)o, c->block == HG_BLOCK_POSTNORM || c->block == HG_BLOCK_PARALLEL;
}

#define NEED(field, entry, when) {field, offsetof(hg_backend_ops, entry), 0, #entry, when}
#define NEED_OR(field, entry, alt, when) {field, offsetof(hg_backend_ops, entry), offsetof(hg_backend_ops, alt), #entry, when}
static const op_need op_needs[] = {
    NEED("device", encoder_forward, always),         NEED("device", encoder_backward, training),
    NEED("device", layernorm_forward, always),       NEED("device", residual_layernorm_forward, always),
    NEED("device", layernorm_backward, training),    NEED("device", layernorm_scratch_bytes, always),
    NEED("device", matmul_forward, always),          NEED("device", matmul_backward, training),
    NEED("device", attention_forward, always),       NEED("device", attention_backward, training),
    NEED("device", attention_scratch_bytes, always), NEED("device", classifier_forward, always),
    NEED("device", classifier_backward, training),   NEED("device", adamw, training),
    NEED("device", sumsq, training),                 NEED("batch", attention_cached, kv_cache),
    NEED("qk_norm", qk_norm_forward, qk_norm),       NEED("qk_norm", qk_norm_backward, qk_norm_training),
    NEED("position", rope_forward, rope),            NEED("position", rope_backward, rope_training),
    NEED("mlp", activation_forward, gated),          NEED("mlp", activation_backward, gated_training),
    NEED_OR("mlp", gelu_forward, matmul_gelu_forward, gelu),
    NEED_OR("mlp", gelu_backward, matmul_gelu_backward, gelu_training),
    NEED("dropout", dropout_backward, dropout),      NEED("block", residual_add, plain_add),
};
#undef NEED
#undef NEED_OR

static int has_entry(const hg_backend_ops *ops, size_t entry) {
    return entry && *(void *const *)((const char *)ops + entry) != NULL;
}

hg_status gpt_check_ops(const hg_config *cfg, const hg_options *opt, const hg_backend_ops *ops) {
    if (!(ops->precisions >> opt->precision & 1))
        return hg_fail(HG_ERR_UNSUPPORTED, "precision: the %s backend has no kernels in %s", ops->name,
                       opt->precision == HG_PRECISION_BF16 ? "bf16" : opt->precision == HG_PRECISION_FP16 ? "fp16" : "fp32");
    /* a backend that keeps the residual stream in fp32 converts each branch's gradient, and
     * a postnorm block's inputs, into the compute type with dropout_backward (p = 0) */
    if (ops->residual_fp32 && opt->precision != HG_PRECISION_FP32 &&
        (opt->training || cfg->block == HG_BLOCK_POSTNORM) && !ops->dropout_backward)
        return hg_fail(HG_ERR_UNSUPPORTED, "precision: the %s backend has no dropout_backward kernel, which converts "
                       "the residual stream into the compute type", ops->name);
    for (size_t i = 0; i < sizeof op_needs / sizeof op_needs[0]; i++) {
        const op_need *n = &op_needs[i];
        if (!n->when(cfg, opt) || has_entry(ops, n->entry) || has_entry(ops, n->alt)) continue;
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: the %s backend has no %s kernel, which this model needs", n->field,
                       ops->name, n->op);
    }
    return HG_OK;
}

hg_status gpt_build_tables(const hg_config *cfg, const hg_options *opt, int threads, hg_table *params,
                           hg_table *weights, hg_table *acts, int *chunk, gpt_sites *sites) {
    int64_t N = (int64_t)opt->batch * opt->seq_len;
    const hg_backend_ops *ops;
    HG_TRY(hg_backend_ops_for(opt->device, &ops));
    HG_TRY(gpt_check_ops(cfg, opt, ops));
    if (ops->supports) HG_TRY(ops->supports(cfg, opt));
    HG_TRY(gpt_sites_resolve(cfg, opt, threads, sites));
    hg_backend probe = {.ops = ops, .threads = threads, .precision = opt->precision, .flags = opt->flags};
    size_t E = hg_precision_bytes(opt->precision), Er = hg_precision_bytes(hg_residual_precision(&probe));
    *chunk = classifier_chunk(cfg, N, ops->classifier_chunk_bytes, E);
    gpt_dims d = gpt_dims_of(cfg);
    hg_attention_shape as = {opt->batch, opt->seq_len, d.NH, d.hs, 1, d.NKV, cfg->attn_softcap};
    size_t att = ops->attention_scratch_bytes(&probe, &as);
    /* the norms' partial sums: C wide, or the q/k norm's widest unit */
    const int qk_width = !cfg->qk_norm ? 0 : cfg->qk_norm_whole ? (d.QD > d.KVD ? d.QD : d.KVD) : d.hs;
    size_t red = ops->layernorm_scratch_bytes(&probe, (int)N, qk_width > d.C ? qk_width : d.C);
    hg_table_init(params);
    hg_table_init(weights);
    hg_table_init(acts);
    if (!build_param_table(cfg, sites, params, (param_elems){4, 4}) ||
        !build_param_table(cfg, sites, weights, (param_elems){E, Er}) ||
        !build_act_table(cfg, opt, sites, acts, E, Er, att, red, *chunk)) {
        hg_table_free(params);
        hg_table_free(weights);
        hg_table_free(acts);
        return hg_fail(HG_ERR_NOMEM, "out of memory building the model's tables");
    }
    hg_table_layout(params);
    hg_table_layout(weights);
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
    if (o->device != HG_DEVICE_CPU && o->device != HG_DEVICE_CUDA)
        return hg_fail(HG_ERR_INVALID, "device must be HG_DEVICE_CPU or HG_DEVICE_CUDA, got %d", (int)o->device);
    if (o->precision != HG_PRECISION_FP32 && o->precision != HG_PRECISION_BF16 && o->precision != HG_PRECISION_FP16)
        return hg_fail(HG_ERR_INVALID, "precision must be HG_PRECISION_FP32, _BF16 or _FP16, got %d", (int)o->precision);
    if (o->precision == HG_PRECISION_FP16)
        return hg_fail(HG_ERR_UNSUPPORTED, "precision: fp16 (with dynamic loss scaling) is not implemented; use bf16");
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
    hg_table p, w, a;
    int chunk;
    gpt_sites sites;
    HG_TRY(gpt_build_tables(cfg, &opt, resolve_threads(&opt), &p, &w, &a, &chunk, &sites));
    size_t copy = opt.precision == HG_PRECISION_FP32 ? 0 : w.bytes;
    memset(out, 0, sizeof *out);
    out->params = p.bytes + copy;
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
    hg_table_free(&w);
    hg_table_free(&a);
    return HG_OK;
}

void gpt_refresh_weights(hg_model *m, size_t lo, size_t n) {
    if (m->weight == (void *)m->param) return;
    for (int i = 0; i < m->params.count; i++) {
        size_t t0 = m->params.specs[i].offset / sizeof(float), t1 = t0 + (size_t)m->params.specs[i].alloc;
        size_t a = t0 > lo ? t0 : lo, b = t1 < lo + n ? t1 : lo + n, E = m->weights.specs[i].elem_size;
        if (a >= b) continue;
        char *w = (char *)gpt_weight(m, i) + (a - t0) * E;
        /* a tensor the copy keeps in fp32 (a norm's, with residual_fp32: the CPU, where
         * param is host memory) */
        if (E == sizeof(float)) m->be->ops->upload(m->be, w, m->param + a, (b - a) * E);
        else m->be->ops->to_compute(m->be, w, m->param + a, b - a);
    }
}

float *gpt_host_begin(const hg_model *m, float *buf) {
    if (m->opt.device == HG_DEVICE_CPU) return buf;
    float *host = hg_aligned_alloc(m->params.bytes);
    if (host) m->be->ops->download(m->be, host, buf, m->params.bytes);
    return host;
}

hg_status gpt_host_end(hg_model *m, float *buf, float *host) {
    if (host != buf) m->be->ops->upload(m->be, buf, host, m->params.bytes);
    /* the compute copy, whether the parameters were written in place (the CPU) or uploaded */
    if (buf == m->param) gpt_refresh_weights(m, 0, m->params.bytes / sizeof(float));
    hg_status st = m->be->ops->sync(m->be);
    gpt_host_free(buf, host);
    return st;
}

/* Each site op's parameters, block by block, from its init (host holds the parameters). */
static hg_status init_site_params(hg_model *m, float *host) {
    for (int s = 0; s < HG_SITES; s++) {
        const gpt_site_def *d = &m->sites.def[s];
        if (!m->sites.on[s] || !d->op.n_params) continue;
        int layers = s == HG_SITE_FINAL_NORM ? 1 : m->d.L;
        for (int l = 0; l < layers; l++) {
            float *p[HG_OP_MAX_TENSORS] = {0};
            for (int i = 0; i < d->op.n_params; i++) p[i] = gpt_param(m, host, gpt_pi(m, l, gpt_site_role((hg_site)s)) + i);
            int layer = s == HG_SITE_FINAL_NORM ? -1 : l;
            hg_clear_error();
            hg_status st = d->op.init(d->op.ctx, &m->sites.shape[s], layer, p, m->opt.seed);
            if (st != HG_OK)
                return hg_fail_returned(st, "op '%s' (%s, block %d): its init", d->name, hg_site_field((hg_site)s),
                                        layer);
        }
    }
    return HG_OK;
}

/* GPT-2's initialisation for every architecture: N(0, 0.02), the residual projections
 * (attn.c_proj, mlp.c_proj) scaled by 1/sqrt(2L), norm weights 1, biases 0. Element by
 * element from the counter-based RNG, so the result does not depend on the thread count.
 * Site ops initialise their own parameters. Written in place on the CPU, staged through
 * host memory and uploaded on other devices. */
static hg_status init_params(hg_model *m) {
    const hg_config *c = &m->cfg;
    float proj_std = 0.02f / sqrtf(2.0f * (float)c->n_layer);
    float *host = gpt_host_begin(m, m->param);
    if (!host) return hg_fail(HG_ERR_NOMEM, "out of memory staging %zu bytes of parameters", m->params.bytes);
    /* the stream of a tensor is its index among the built-in ones: a site op's
     * parameters leave the others' initial values as they are without it */
    uint32_t stream = 0;
    for (int i = 0; i < m->params.count; i++) {
        const hg_tensor_spec *s = &m->params.specs[i];
        float *p = gpt_param(m, host, i);
        if (s->flags & HG_SPEC_SITE) continue;
        const uint32_t at = stream++;
        int is_bias = (s->flags & HG_SPEC_BIAS) != 0, is_norm = (s->flags & HG_SPEC_NORM) && !is_bias;
        float std = s->flags & HG_SPEC_RESIDUAL ? proj_std : 0.02f;
        uint64_t seed = m->opt.seed;
        #pragma omp parallel for schedule(static) num_threads(m->threads)
        for (int64_t j = 0; j < s->numel; j++)
            p[j] = is_norm ? 1.0f : is_bias ? 0.0f : std * hg_rng_normal(seed, at, (uint64_t)j);
    }
    hg_status st = init_site_params(m, host);
    if (st != HG_OK) {
        gpt_host_free(m->param, host);
        return st;
    }
    return gpt_host_end(m, m->param, host);
}

/* Frequency i of the rotary embedding, in float as Hugging Face's Llama computes it:
 * theta^(-2i/hs), then Llama 3.1's band rescaling when the config asks for it. */
static float rope_freq(const hg_config *c, int i, int hs) {
    float f = 1.0f / powf(gpt_rope_theta(c), (float)(2 * i) / (float)hs);
    if (c->rope_scaling != HG_ROPE_LLAMA3) return f;
    const float L = (float)c->rope_original_max_len, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
    const float wavelen = (float)6.283185307179586 / f; /* 2 pi */
    if (wavelen > L / lo) return f / c->rope_factor;
    if (wavelen < L / hi) return f;
    const float smooth = (L / wavelen - lo) / (hi - lo);
    return (1.0f - smooth) * f / c->rope_factor + smooth * f;
}

/* The rotary table A_ROPE: row t holds cos(t * f_i) for i < r/2, then sin(t * f_i)
 * (rope_freq over the r rotated dimensions, as Hugging Face computes a partial rotary's
 * frequencies); the angle and its cosine and sine are taken in double. */
static hg_status init_rope(hg_model *m) {
    if (m->cfg.position != HG_POS_ROPE) return HG_OK;
    const int hs = m->d.rot, half = hs / 2, T = m->cfg.max_seq_len;
    size_t bytes = sizeof(float) * (size_t)T * hs;
    float *host = hg_aligned_alloc(bytes);
    if (!host) return hg_fail(HG_ERR_NOMEM, "out of memory for the %zu-byte rotary table", bytes);
    for (int i = 0; i < half; i++) {
        float f = rope_freq(&m->cfg, i, hs);
        for (int t = 0; t < T; t++) {
            double a = (double)t * (double)f;
            host[(size_t)t * hs + i] = (float)cos(a);
            host[(size_t)t * hs + half + i] = (float)sin(a);
        }
    }
    m->be->ops->upload(m->be, gpt_act(m, A_ROPE, 0), host, bytes);
    hg_status st = m->be->ops->sync(m->be);
    hg_aligned_free(host);
    return st;
}

void hg_model_free(hg_model *m) {
    if (!m) return;
    if (m->be) {
        void *copy = m->weight != (void *)m->param ? m->weight : NULL;
        void *bufs[] = {m->param, m->grad, m->adam_m, m->adam_v, copy, m->act};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) m->be->ops->free(m->be, bufs[i]);
        m->be->ops->destroy(m->be);
    }
    hg_table_free(&m->params);
    hg_table_free(&m->weights);
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
    hg_model *m = calloc(1, sizeof *m);
    if (!m) return hg_fail(HG_ERR_NOMEM, "out of memory for the model struct");
    m->cfg = *cfg;
    m->opt = opt;
    m->d = gpt_dims_of(cfg);
    m->threads = resolve_threads(&opt);
    m->opt.threads = m->threads;
    m->plan = plan;
    m->train_mode = opt.training;
    m->dropout_seed = opt.seed;
    hg_status st = hg_backend_create(&m->be, &opt, m->threads);
    if (st == HG_OK) {
        size_t avail = m->be->ops->mem_available(m->be);
        if (plan.total > avail)
            st = hg_fail(HG_ERR_NOMEM, "model needs %.2f GiB (params %.2f, grads+optimizer %.2f, activations %.2f, "
                         "scratch %.2f) but only %.2f GiB of %s memory is available",
                         plan.total / 1073741824.0, plan.params / 1073741824.0,
                         (plan.grads + plan.optimizer) / 1073741824.0, plan.activations / 1073741824.0,
                         plan.scratch / 1073741824.0, avail / 1073741824.0, m->be->ops->name);
    }
    if (st == HG_OK) {
        m->host_losses = malloc(sizeof(float) * (size_t)opt.batch * opt.seq_len);
        if (!m->host_losses) st = hg_fail(HG_ERR_NOMEM, "out of memory for the loss buffer");
    }
    if (st == HG_OK)
        st = gpt_build_tables(cfg, &opt, m->threads, &m->params, &m->weights, &m->acts, &m->chunk, &m->sites);
    if (st != HG_OK) {
        hg_model_free(m);
        return st;
    }
    m->pm = gpt_param_map_of(&m->params);
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
        m->weight = opt.precision == HG_PRECISION_FP32 ? (void *)m->param : be->ops->alloc(be, m->weights.bytes);
        if (!m->weight) st = hg_fail(HG_ERR_NOMEM, "out of memory allocating %zu bytes of weights", m->weights.bytes);
    }
    if (st == HG_OK) {
        m->act = be->ops->alloc(be, m->acts.bytes);
        if (!m->act) st = hg_fail(HG_ERR_NOMEM, "out of memory allocating %zu bytes of activations", m->acts.bytes);
        else be->ops->zero(be, m->act, m->acts.bytes);
    }
    if (st == HG_OK) st = init_params(m);
    if (st == HG_OK) st = init_rope(m);
    if (st == HG_OK) st = gpt_run_model_hooks(m);
    if (st != HG_OK) {
        hg_model_free(m);
        return st;
    }
    *out = m;
    return HG_OK;
}

const hg_config *hg_model_config(const hg_model *m) { return &m->cfg; }
const hg_options *hg_model_options(const hg_model *m) { return &m->opt; }
hg_memory_plan hg_model_memory(const hg_model *m) { return m->plan; }

const char *hg_model_attention_kernels(const hg_model *m) {
    const char *s = m && m->be->ops->attention_kernels ? m->be->ops->attention_kernels(m->be) : NULL;
    return s ? s : "";
}

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
    out->device = m->opt.device;
    return HG_OK;
}

hg_status hg_param_find(const hg_model *m, const char *name, hg_param_info *out) {
    if (!m || !name) return hg_fail(HG_ERR_INVALID, "hg_param_find: NULL argument");
    int i = hg_table_find(&m->params, name);
    if (i < 0) return hg_fail(HG_ERR_INVALID, "no parameter named '%s'", name);
    return hg_param_at(m, i, out);
}

/* *out = the fp32 tensor `index` of the buffer holding `part`. */
static hg_status param_part(const hg_model *m, int index, hg_param_part part, const void *host, float **out) {
    if (!m || !host) return hg_fail(HG_ERR_INVALID, "hg_param_read/write: NULL argument");
    if (index < 0 || index >= m->params.count)
        return hg_fail(HG_ERR_INVALID, "parameter index %d is out of range [0, %d)", index, m->params.count);
    if ((unsigned)part > HG_PARAM_ADAM_V) return hg_fail(HG_ERR_INVALID, "part %d is not an hg_param_part", (int)part);
    float *bufs[] = {m->param, m->grad, m->adam_m, m->adam_v};
    if (!bufs[part]) return hg_fail(HG_ERR_STATE, "this model was created with training=0: it has no gradients or moments");
    if (part >= HG_PARAM_ADAM_M && m->opt.shards > 1)
        return hg_fail(HG_ERR_STATE, "this model holds 1/%d of the AdamW state (ZeRO-1): use hg_dist_optimizer_get/set",
                       m->opt.shards);
    *out = gpt_param(m, bufs[part], index);
    return HG_OK;
}

hg_status hg_param_read(const hg_model *m, int index, hg_param_part part, float *host) {
    float *src = NULL;
    HG_TRY(param_part(m, index, part, host, &src));
    m->be->ops->download(m->be, host, src, sizeof(float) * (size_t)m->params.specs[index].numel);
    return m->be->ops->sync(m->be);
}

hg_status hg_param_write(hg_model *m, int index, hg_param_part part, const float *host) {
    float *dst = NULL;
    HG_TRY(param_part(m, index, part, host, &dst));
    m->be->ops->upload(m->be, dst, host, sizeof(float) * (size_t)m->params.specs[index].numel);
    if (part == HG_PARAM_DATA) gpt_refresh_weights(m, m->params.specs[index].offset / sizeof(float), (size_t)m->params.specs[index].numel);
    return m->be->ops->sync(m->be);
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
    char why[256];
    if (!gpt_same_architecture(&dst->cfg, &src->cfg, why, sizeof why))
        return hg_fail(HG_ERR_INVALID, "hg_model_copy_params: the models' configs differ: %s", why);
    /* Same config, same fp32 parameter table: one copy, staged through host memory when
     * neither model is on the CPU; then dst's compute copy. */
    size_t bytes = src->params.bytes;
    hg_backend *sb = src->be, *db = dst->be;
    float *host = dst->opt.device == HG_DEVICE_CPU ? dst->param : src->opt.device == HG_DEVICE_CPU ? src->param : NULL;
    float *staged = host ? NULL : hg_aligned_alloc(bytes);
    if (!host && !staged) return hg_fail(HG_ERR_NOMEM, "out of memory staging %zu bytes of parameters", bytes);
    if (host != src->param) sb->ops->download(sb, host ? host : staged, src->param, bytes);
    hg_status st = sb->ops->sync(sb);
    if (st == HG_OK && host != dst->param) db->ops->upload(db, dst->param, host ? host : staged, bytes);
    if (st == HG_OK) gpt_refresh_weights(dst, 0, bytes / sizeof(float));
    if (st == HG_OK) st = db->ops->sync(db);
    hg_aligned_free(staged);
    dst->kv_len = 0; /* the cache held keys of the old weights */
    return st;
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
