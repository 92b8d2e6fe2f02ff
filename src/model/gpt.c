/* The model object: building the parameter and activation tables, allocation from them,
 * initialisation, and the parameter API. */
#include "model/gpt.h"

#include <fnmatch.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/plan.h"

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

/* ---- LoRA (hg_lora, ops/lora.h) ---- */

static const char *const lora_layer_name[HG_LORA_GROUPS] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};

gpt_lora_group gpt_lora_group_of(const hg_config *c, const hg_lora *lora, hg_lora_group g) {
    const gpt_dims d = gpt_dims_of(c);
    static const int in[] = {0, 1, 0, 2}; /* K: C, QD or F */
    gpt_lora_group out = {.K = in[g] == 0 ? d.C : in[g] == 1 ? d.QD : d.F,
                          .OUT = g == HG_LORA_QKV ? d.QKV : g == HG_LORA_MLP_IN ? d.FI : d.C};
    const int split = lora->split[g] > 1 ? lora->split[g] : 1;
    int c0[3] = {0, 0, 0}, cols[3] = {out.OUT, 0, 0};
    if (g == HG_LORA_QKV && split == 3) c0[1] = d.QD, c0[2] = d.QD + d.KVD, cols[0] = d.QD, cols[1] = cols[2] = d.KVD;
    if (g == HG_LORA_MLP_IN && split == 2) c0[1] = d.F, cols[0] = cols[1] = d.F;
    for (int j = 0; lora->r > 0 && j < split && j < HG_LORA_MAX_MODULES; j++)
        if (lora->targets[g] >> j & 1) {
            out.module[out.n] = j, out.c0[out.n] = c0[j], out.cols[out.n] = cols[j];
            out.n++;
        }
    return out;
}

hg_status gpt_lora_check(const hg_config *c, const hg_lora *lora) {
    if (lora->r == 0) return HG_OK;
    if (lora->r < 0 || lora->r > 65536) return hg_fail(HG_ERR_INVALID, "lora.r must be in [1, 65536], got %d", lora->r);
    if (!(lora->alpha > 0.0f) || isinf(lora->alpha))
        return hg_fail(HG_ERR_INVALID, "lora.alpha must be a finite number > 0, got %g", (double)lora->alpha);
    if (!(lora->dropout >= 0.0f && lora->dropout < 1.0f))
        return hg_fail(HG_ERR_INVALID, "lora.dropout must be in [0, 1), got %g", (double)lora->dropout);
    if ((unsigned)lora->init > HG_LORA_INIT_GAUSSIAN) return hg_fail(HG_ERR_INVALID, "lora.init %d is unknown", (int)lora->init);
    int any = 0;
    for (int g = 0; g < HG_LORA_GROUPS; g++) {
        const int split = lora->split[g] ? lora->split[g] : 1;
        const int ok = split == 1 || (g == HG_LORA_QKV && split == 3) ||
                       (g == HG_LORA_MLP_IN && split == 2 && hg_mlp_gated(c->mlp));
        if (!ok) return hg_fail(HG_ERR_INVALID, "lora.split of %s: %d modules is not how this model's layer divides",
                                lora_layer_name[g], lora->split[g]);
        if (lora->targets[g] >> split)
            return hg_fail(HG_ERR_INVALID, "lora.targets of %s: module %d of %d", lora_layer_name[g],
                           31 - __builtin_clz(lora->targets[g]), split);
        gpt_lora_group lg = gpt_lora_group_of(c, lora, (hg_lora_group)g);
        for (int j = 0; j < lg.n; j++) {
            int width = lg.K < lg.cols[j] ? lg.K : lg.cols[j];
            if (lora->r > width)
                return hg_fail(HG_ERR_INVALID, "lora.r %d is above %s's width: its module %d is %d by %d", lora->r,
                               lora_layer_name[g], lg.module[j], lg.K, lg.cols[j]);
        }
        any |= lg.n > 0;
    }
    if (!any) return hg_fail(HG_ERR_INVALID, "lora.targets: no linear layer is adapted");
    return HG_OK;
}

/* The adapters of group g in block l: A (r, K) then B (cols, r) of each adapted module j,
 * "h.{l}.<layer>.lora_A.{j}" and "...lora_B.{j}". */
static int add_lora_params(hg_table *t, param_elems pe, const hg_config *c, const hg_lora *lora, hg_lora_group g, int l) {
    if (!lora) return 1;
    gpt_lora_group lg = gpt_lora_group_of(c, lora, g);
    int ok = 1;
    for (int j = 0; ok && j < lg.n; j++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "%s.lora_A.%d", lora_layer_name[g], lg.module[j]);
        snprintf(b, sizeof b, "%s.lora_B.%d", lora_layer_name[g], lg.module[j]);
        ok = add_param_flags(t, pe, l, gpt_lora_role(g), a, 2, lora->r, lg.K, 0, HG_SPEC_LORA) &&
             add_param_flags(t, pe, l, gpt_lora_role(g), b, 2, lg.cols[j], lora->r, 0, HG_SPEC_LORA);
    }
    return ok;
}

/* The parameter table from the description, in the order gpt_role documents. The
 * embedding and output matrices reserve Vp rows for the classifier's padded vocabulary.
 * The one place that says which parameters a config has: the model's tables, the counts
 * (hg_config_param_count, hg_train_flops) and the Hugging Face names all follow it. */
static int build_param_table(const hg_config *c, const gpt_sites *st, const hg_lora *lora, hg_table *t,
                             param_elems pe) {
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
             add_lora_params(t, pe, c, lora, HG_LORA_QKV, l) &&
             (!qn || add_param(t, pe, l, R_QNORM_W, "attn.q_norm.weight", 1, c->qk_norm_whole ? d.QD : d.hs, 1, 0)) &&
             (!qn || add_param(t, pe, l, R_KNORM_W, "attn.k_norm.weight", 1, c->qk_norm_whole ? d.KVD : d.hs, 1, 0)) &&
             add_param(t, pe, l, R_PROJ_W, "attn.c_proj.weight", 2, d.QD, C, 0) &&
             (c->omit & HG_OMIT_PROJ_BIAS || add_param(t, pe, l, R_PROJ_B, "attn.c_proj.bias", 1, C, 1, 0)) &&
             add_lora_params(t, pe, c, lora, HG_LORA_ATTN_OUT, l) &&
             add_site_params(t, pe, st, HG_SITE_ATTN_PROJ, l, R_SITE_ATTN) &&
             (!(np && nw) || add_param(t, pe, l, R_POST1_W, "attn.post_norm.weight", 1, C, 1, 0)) &&
             (!(np && nb) || add_param(t, pe, l, R_POST1_B, "attn.post_norm.bias", 1, C, 1, 0)) &&
             (!(n2 && nw) || add_param(t, pe, l, R_LN2_W, "ln_2.weight", 1, C, 1, 0)) &&
             (!(n2 && nb) || add_param(t, pe, l, R_LN2_B, "ln_2.bias", 1, C, 1, 0)) &&
             add_param(t, pe, l, R_FC_W, "mlp.c_fc.weight", 2, C, d.FI, 0) &&
             (c->omit & HG_OMIT_MLP_BIAS || add_param(t, pe, l, R_FC_B, "mlp.c_fc.bias", 1, d.FI, 1, 0)) &&
             add_lora_params(t, pe, c, lora, HG_LORA_MLP_IN, l) &&
             add_site_params(t, pe, st, HG_SITE_MLP_ACT, l, R_SITE_MLP) &&
             add_param(t, pe, l, R_FCPROJ_W, "mlp.c_proj.weight", 2, d.F, C, 0) &&
             (c->omit & HG_OMIT_MLP_BIAS || add_param(t, pe, l, R_FCPROJ_B, "mlp.c_proj.bias", 1, C, 1, 0)) &&
             add_lora_params(t, pe, c, lora, HG_LORA_MLP_OUT, l) &&
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
    if (build_param_table(cfg, &st, NULL, &t, (param_elems){4, 4})) {
        n = 0;
        for (int i = 0; i < t.count; i++)
            if (!(t.specs[i].flags & skip)) n += t.specs[i].numel;
    }
    hg_table_free(&t);
    return n;
}

hg_status gpt_names_model(const hg_config *cfg, const hg_lora *lora, hg_model **out) {
    *out = NULL;
    HG_TRY(hg_config_validate(cfg));
    hg_model *m = calloc(1, sizeof *m);
    if (!m) return hg_fail(HG_ERR_NOMEM, "out of memory");
    m->cfg = *cfg, m->opt = hg_options_default(), m->d = gpt_dims_of(cfg), m->hf_arch = -1;
    if (lora) m->opt.lora = *lora;
    gpt_sites_registered(cfg, &m->sites);
    hg_table_init(&m->params);
    if (!build_param_table(cfg, &m->sites, lora && lora->r > 0 ? lora : NULL, &m->params, (param_elems){4, 4})) {
        gpt_names_free(m);
        return hg_fail(HG_ERR_NOMEM, "out of memory building the parameter table");
    }
    m->train_bytes = hg_table_layout_last(&m->params, HG_SPEC_FROZEN);
    m->pm = gpt_param_map_of(&m->params);
    m->param = (float *)((uintptr_t)1 << 48); /* a placeholder: never read */
    *out = m;
    return HG_OK;
}

void gpt_names_free(hg_model *m) {
    if (!m) return;
    hg_table_free(&m->params);
    free(m);
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

/* The activation table, in the order of enum gpt_act: each tensor at its full shape, with
 * the copies the plan gives it (plan NULL: the trace's maximal table, L + 1 copies of
 * every tensor). A tensor the plan gives no copies has no bytes: no op touches it.
 * E is the compute type's size, Er the residual type's (the residual stream and its
 * gradient); statistics, ids, losses and the rotary table are 4 bytes; the two op
 * scratches are sized in bytes. */
static int build_act_table(const hg_config *c, const hg_options *o, const gpt_sites *st, hg_table *t, size_t E,
                           size_t Er, size_t attention_scratch, size_t reduce_scratch, int chunk,
                           const gpt_plan *plan) {
    gpt_dims d = gpt_dims_of(c);
    const int64_t C = d.C, N = (int64_t)o->batch * o->seq_len, wide = d.FI > d.QKV ? d.FI : d.QKV;
    const unsigned in = HG_SPEC_INPUT, out = HG_SPEC_OUTPUT;
    int a = 0, ok = 1;
#define ACT(name, d0, d1, elem, flags)                                                                  \
    do {                                                                                                \
        int64_t n_ = plan ? plan->copies[a] : d.L + 1;                                                  \
        unsigned f_ = (flags) | (plan && plan->kept[a] ? HG_SPEC_KEPT : 0);                             \
        ok &= add(t, name, 2, n_ ? (d0) : 0, d1, 0, n_ ? n_ : 1, elem, f_) == a;                        \
        a++;                                                                                            \
    } while (0)
    ACT("tokens", N, 1, 4, in);
    ACT("targets", N, 1, 4, in);
    ACT("residual", N, C, Er, 0);
    ACT("ln1", N, C, E, 0);
    ACT("ln1.mean", N, 1, 4, 0);
    ACT("ln1.rstd", N, 1, 4, 0);
    ACT("qkv", N, d.QKV, E, 0);
    ACT("qk_raw", N, d.QD + d.KVD, E, 0);
    ACT("qk_rstd", N, c->qk_norm_whole ? 2 : d.NH + d.NKV, 4, 0);
    ACT("atty", N, d.QD, E, 0);
    ACT("lse", d.NH, N, 4, 0);
    ACT("residual2", N, C, Er, 0);
    ACT("ln2", N, C, E, 0);
    ACT("ln2.mean", N, 1, 4, 0);
    ACT("ln2.rstd", N, 1, 4, 0);
    ACT("fch", N, d.FI, E, 0);
    ACT("post1", N, C, E, 0);
    ACT("post1.mean", N, 1, 4, 0);
    ACT("post1.rstd", N, 1, 4, 0);
    ACT("post2", N, C, E, 0);
    ACT("post2.mean", N, 1, 4, 0);
    ACT("post2.rstd", N, 1, 4, 0);
    ACT("lnf", N, C, E, 0);
    ACT("lnf.mean", N, 1, 4, 0);
    ACT("lnf.rstd", N, 1, 4, 0);
    ACT("losses", N, 1, 4, out);
    ACT("kv_cache", 2 * N, d.KVD, E, in | out);
    ACT("rope", c->max_seq_len, d.rot, 4, in);
    ACT("scratch.proj", N, C, E, 0);
    ACT("scratch.post", N, C, E, 0);
    ACT("scratch.act", N, d.F, E, 0);
    ACT("scratch.logits", chunk, d.Vp, E, 0);
    ACT("scratch.attention", (int64_t)attention_scratch, 1, 1, 0);
    ACT("scratch.dresidual", N, C, Er, 0);
    ACT("scratch.dbranch", N, C, E, 0);
    ACT("scratch.dln", N, C, E, 0);
    ACT("scratch.datty", N, d.QD, E, 0);
    ACT("scratch.dwide", N, wide, E, 0);
    ACT("scratch.dact", N, d.F, E, 0);
    ACT("scratch.dpost", N, C, E, 0);
    ACT("scratch.reduce", (int64_t)reduce_scratch, 1, 1, 0);
    size_t lora_scratch = 0;
    for (int g = 0; g < HG_LORA_GROUPS; g++) { /* the adapters' h, "lora.<layer>.h" */
        gpt_lora_group lg = gpt_lora_group_of(c, &o->lora, (hg_lora_group)g);
        hg_lora_shape ls = {.N = (int)N, .K = lg.K, .OUT = lg.OUT, .r = o->lora.r, .n = lg.n};
        size_t b = hg_lora_scratch_bytes(&ls, o->lora.dropout > 0);
        lora_scratch = b > lora_scratch ? b : lora_scratch;
        char name[64];
        snprintf(name, sizeof name, "lora.%s.h", lora_layer_name[g]);
        ACT(name, N, (int64_t)o->lora.r * lg.n, E, 0);
    }
    for (int g = 0; g < HG_LORA_GROUPS; g++) { /* their dropout masks, "lora.<layer>.keep" */
        gpt_lora_group lg = gpt_lora_group_of(c, &o->lora, (hg_lora_group)g);
        hg_lora_shape ls = {.N = (int)N, .K = lg.K};
        char name[64];
        snprintf(name, sizeof name, "lora.%s.keep", lora_layer_name[g]);
        ACT(name, lg.n && o->lora.dropout > 0 && o->training ? (int64_t)hg_lora_keep_bytes(&ls) : 0, 1, 1, 0);
    }
    ACT("scratch.lora", (int64_t)lora_scratch, 1, 1, 0);
    ACT("site.attn_proj.in", N, C, E, 0);
    ACT("site.final_norm.out", N, C, E, 0);
    ACT("scratch.site_grad", N, C, E, 0);
    for (int s = 0; s < HG_SITES; s++) { /* named after the config field, less its "op_" */
        char name[64];
        snprintf(name, sizeof name, "scratch.site.%s", hg_site_field((hg_site)s) + 3);
        ACT(name, st->on[s] ? (int64_t)st->z[s].scratch_bytes : 0, 1, 1, 0);
    }
    for (int s = 0; s < HG_SITES; s++)
        for (int k = 0; k < HG_OP_MAX_TENSORS; k++) {
            char name[64];
            snprintf(name, sizeof name, "site.%s.saved%d", hg_site_field((hg_site)s) + 3, k);
            ACT(name, st->on[s] ? st->z[s].saved[k] : 0, 1, 4, 0);
        }
#undef ACT
    return ok && a == GPT_ACTS;
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

/* Flags the parameters no optimizer trains (HG_SPEC_FROZEN) in both tables: with
 * adapters, all but them; else those opt->freeze's globs match (each must match one). */
static hg_status mark_frozen(const hg_options *opt, hg_table *params, hg_table *weights) {
    const int lora = opt->lora.r > 0;
    if (!lora && !opt->freeze) return HG_OK;
    char *buf = strdup(opt->freeze ? opt->freeze : "");
    if (!buf) return hg_fail(HG_ERR_NOMEM, "out of memory");
    for (char *save = NULL, *g = strtok_r(buf, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
        int hit = 0;
        for (int i = 0; i < params->count; i++)
            if (!strcmp(g, "all") || !fnmatch(g, params->specs[i].name, 0)) {
                hit = 1;
                if (!(params->specs[i].flags & HG_SPEC_LORA)) params->specs[i].flags |= HG_SPEC_FROZEN;
            }
        if (!hit) {
            hg_status st = hg_fail(HG_ERR_INVALID, "freeze: '%s' matches no parameter of this model", g);
            free(buf);
            return st;
        }
    }
    free(buf);
    int trained = 0;
    for (int i = 0; i < params->count; i++) {
        if (lora && !(params->specs[i].flags & HG_SPEC_LORA)) params->specs[i].flags |= HG_SPEC_FROZEN;
        weights->specs[i].flags |= params->specs[i].flags & HG_SPEC_FROZEN;
        trained += !(params->specs[i].flags & HG_SPEC_FROZEN);
    }
    if (!trained && opt->training) return hg_fail(HG_ERR_INVALID, "freeze: every parameter is frozen; nothing would train");
    return HG_OK;
}

/* Under base_precision BF16, each frozen tensor whose compute copy is bf16 is held as
 * that copy alone: 2-byte elements in the parameter table, an alias in the weights
 * table (a norm the backend keeps in fp32 keeps its master). */
static hg_status hold_base_bf16(const hg_options *opt, hg_table *params, hg_table *weights) {
    if (opt->base_precision != HG_PRECISION_BF16) return HG_OK;
    int held = 0;
    for (int i = 0; i < params->count; i++)
        if (params->specs[i].flags & HG_SPEC_FROZEN && weights->specs[i].elem_size == 2) {
            params->specs[i].elem_size = 2;
            weights->specs[i].flags |= HG_SPEC_ALIAS;
            held++;
        }
    if (!held) return hg_fail(HG_ERR_INVALID, "base_precision: bf16 holds the frozen tensors in bf16, and none is frozen "
                              "(freeze, or lora's base)");
    return HG_OK;
}

/* Refuses a backend without kernels in opt's precision, or one that keeps the residual
 * stream in fp32 and cannot convert it into the compute type (dropout_backward with
 * p = 0 converts each branch's gradient, and a postnorm block's inputs). */
static hg_status check_precision(const hg_config *cfg, const hg_options *opt, const hg_backend_ops *ops) {
    if (!(ops->precisions >> opt->precision & 1))
        return hg_fail(HG_ERR_UNSUPPORTED, "precision: the %s backend has no kernels in %s", ops->name,
                       opt->precision == HG_PRECISION_BF16 ? "bf16" : opt->precision == HG_PRECISION_FP16 ? "fp16" : "fp32");
    if (ops->residual_fp32 && opt->precision != HG_PRECISION_FP32 &&
        (opt->training || cfg->block == HG_BLOCK_POSTNORM) && !ops->dropout_backward)
        return hg_fail(HG_ERR_UNSUPPORTED, "precision: the %s backend has no dropout_backward kernel, which converts "
                       "the residual stream into the compute type", ops->name);
    return HG_OK;
}

/* The tables of (cfg, opt) on a backend with table ops: the parameters, their compute
 * copy, and the activations as the step's trace plans them (model/plan.h), which also
 * refuses a model whose step needs an entry ops lacks. trace_out: see gpt_plan_derive. */
static hg_status build_tables(const hg_config *cfg, const hg_options *opt, const hg_backend_ops *ops, int threads,
                              hg_table *params, hg_table *weights, hg_table *acts, int *chunk, gpt_sites *sites,
                              size_t *train_bytes, gpt_trace *trace_out) {
    int64_t N = (int64_t)opt->batch * opt->seq_len;
    HG_TRY(check_precision(cfg, opt, ops));
    HG_TRY(gpt_sites_resolve(cfg, opt, threads, sites));
    hg_backend probe = {.ops = ops, .threads = threads, .precision = opt->precision, .flags = opt->flags};
    size_t E = hg_precision_bytes(opt->precision), Er = hg_precision_bytes(hg_residual_precision(&probe));
    *chunk = classifier_chunk(cfg, N, ops->classifier_chunk_bytes, E);
    gpt_dims d = gpt_dims_of(cfg);
    hg_attention_shape as = {opt->batch, opt->seq_len, d.NH, d.hs, 1, d.NKV, cfg->attn_softcap, 0, NULL};
    size_t att = ops->attention_scratch_bytes(&probe, &as);
    /* the norms' partial sums: C wide, or the q/k norm's widest unit */
    const int qk_width = !cfg->qk_norm ? 0 : cfg->qk_norm_whole ? (d.QD > d.KVD ? d.QD : d.KVD) : d.hs;
    size_t red = ops->layernorm_scratch_bytes(&probe, (int)N, qk_width > d.C ? qk_width : d.C);
    hg_table_init(params);
    hg_table_init(weights);
    hg_table_init(acts);
    hg_table all;
    hg_table_init(&all);
    gpt_plan *plan = malloc(sizeof *plan);
    hg_status st = HG_OK;
    const hg_lora *lora = opt->lora.r > 0 ? &opt->lora : NULL;
    if (!plan || !build_param_table(cfg, sites, lora, params, (param_elems){4, 4}) ||
        !build_param_table(cfg, sites, lora, weights, (param_elems){E, Er}) ||
        !build_act_table(cfg, opt, sites, &all, E, Er, att, red, *chunk, NULL))
        st = hg_fail(HG_ERR_NOMEM, "out of memory building the model's tables");
    if (st == HG_OK) st = mark_frozen(opt, params, weights);
    if (st == HG_OK) st = hold_base_bf16(opt, params, weights);
    if (st == HG_OK) {
        /* the compute copy laid out as the masters: in fp32 it is the same buffer */
        *train_bytes = hg_table_layout_last(params, HG_SPEC_FROZEN);
        hg_table_layout_last(weights, HG_SPEC_FROZEN);
        hg_table_layout(&all);
        st = gpt_plan_derive(cfg, opt, ops, threads, params, weights, &all, *chunk, sites, plan, trace_out);
    }
    if (st == HG_OK && !build_act_table(cfg, opt, sites, acts, E, Er, att, red, *chunk, plan))
        st = hg_fail(HG_ERR_NOMEM, "out of memory building the model's tables");
    if (st == HG_OK && ops->supports) st = ops->supports(cfg, opt);
    hg_table_free(&all);
    free(plan);
    if (st != HG_OK) {
        hg_table_free(params);
        hg_table_free(weights);
        hg_table_free(acts);
        return st;
    }
    hg_table_layout(acts);
    return HG_OK;
}

hg_status gpt_check_ops(const hg_config *cfg, const hg_options *opt, const hg_backend_ops *ops) {
    hg_table p, w, a;
    int chunk;
    gpt_sites *sites = malloc(sizeof *sites);
    if (!sites) return hg_fail(HG_ERR_NOMEM, "out of memory checking the model's ops");
    hg_options o = *opt;
    if (!o.seq_len) o.seq_len = cfg->max_seq_len;
    size_t train_bytes;
    hg_status st = build_tables(cfg, &o, ops, resolve_threads(&o), &p, &w, &a, &chunk, sites, &train_bytes, NULL);
    if (st == HG_OK) hg_table_free(&p), hg_table_free(&w), hg_table_free(&a);
    free(sites);
    return st;
}

hg_status gpt_build_tables(const hg_config *cfg, const hg_options *opt, int threads, hg_table *params,
                           hg_table *weights, hg_table *acts, int *chunk, gpt_sites *sites, size_t *train_bytes,
                           gpt_trace *trace_out) {
    const hg_backend_ops *ops;
    HG_TRY(hg_backend_ops_for(opt->device, &ops));
    return build_tables(cfg, opt, ops, threads, params, weights, acts, chunk, sites, train_bytes, trace_out);
}

int gpt_act_locate(const hg_model *m, const void *p, int *buffer, int *copy) {
    uintptr_t base = (uintptr_t)m->act, at = (uintptr_t)p;
    if (!p || at < base || at >= base + m->acts.bytes) return 0;
    size_t off = at - base;
    for (int i = 0; i < m->acts.count; i++) {
        const hg_tensor_spec *s = &m->acts.specs[i];
        size_t copy_bytes = (size_t)s->alloc * s->elem_size;
        if (copy_bytes && off >= s->offset && off < s->offset + copy_bytes * (size_t)s->copies) {
            *buffer = i;
            *copy = (int)((off - s->offset) / copy_bytes);
            return 1;
        }
    }
    return 0;
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
    HG_TRY(gpt_lora_check(cfg, &o->lora));
    if (o->base_precision != HG_PRECISION_FP32 && o->base_precision != HG_PRECISION_BF16)
        return hg_fail(HG_ERR_INVALID, "base_precision must be HG_PRECISION_FP32 or _BF16, got %d", (int)o->base_precision);
    if (o->base_precision == HG_PRECISION_BF16 && o->precision != HG_PRECISION_BF16)
        return hg_fail(HG_ERR_INVALID, "base_precision: a base held in bf16 needs precision bf16 (its products run in bf16)");
    if ((unsigned)o->recompute > HG_RECOMPUTE_BLOCK)
        return hg_fail(HG_ERR_INVALID, "recompute must be HG_RECOMPUTE_NONE, _ATTN, _MLP or _BLOCK, got %d", (int)o->recompute);
    if (o->optim_state != HG_PRECISION_FP32 && o->optim_state != HG_PRECISION_BF16)
        return hg_fail(HG_ERR_INVALID, "optim_state must be HG_PRECISION_FP32 or _BF16, got %d", (int)o->optim_state);
    if (o->grad_precision != HG_PRECISION_FP32 && o->grad_precision != HG_PRECISION_BF16)
        return hg_fail(HG_ERR_INVALID, "grad_precision must be HG_PRECISION_FP32 or _BF16, got %d", (int)o->grad_precision);
    if (o->grad_precision == HG_PRECISION_BF16 && o->shards > 1)
        return hg_fail(HG_ERR_UNSUPPORTED, "grad_precision: bf16 gradients with ZeRO-1 (shards > 1) are not "
                       "implemented; use fp32 gradients, or one slice");
    if (o->optim_state == HG_PRECISION_BF16 && o->shards > 1)
        return hg_fail(HG_ERR_UNSUPPORTED, "optim_state: AdamW moments in bf16 with ZeRO-1 (shards > 1) are not "
                       "implemented; use fp32 moments, or one slice");
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
    size_t trained;
    HG_TRY(gpt_build_tables(cfg, &opt, resolve_threads(&opt), &p, &w, &a, &chunk, &sites, &trained, NULL));
    size_t copy = opt.precision == HG_PRECISION_FP32 ? 0 : w.bytes;
    memset(out, 0, sizeof *out);
    out->params = p.bytes + copy;
    if (opt.training) { /* the trainable parameters' alone */
        size_t lo, n;
        gpt_shard(trained / sizeof(float), opt.shards, opt.shard, &lo, &n);
        out->grads = trained;
        if (opt.grad_precision == HG_PRECISION_BF16) {
            gpt_param_map pm = gpt_param_map_of(&p);
            out->grads = trained / 2 + sizeof(float) * gpt_grad_windows(&p, &pm, cfg->n_layer, NULL);
        }
        out->optimizer = 2 * n * hg_precision_bytes(opt.optim_state);
    }
    for (int i = 0; i < a.count; i++) {
        const hg_tensor_spec *s = &a.specs[i];
        size_t bytes = (size_t)s->alloc * s->copies * s->elem_size;
        if (s->flags & HG_SPEC_KEPT) out->activations += bytes;
        else out->scratch += bytes;
    }
    /* on a device, the copy of packed documents' positions (gpt_positions) */
    const size_t pos = opt.device != HG_DEVICE_CPU ? sizeof(int32_t) * (size_t)opt.batch * opt.seq_len : 0;
    out->scratch += pos;
    out->total = a.bytes + pos + out->params + out->grads + out->optimizer;
    hg_table_free(&p);
    hg_table_free(&w);
    hg_table_free(&a);
    return HG_OK;
}

size_t gpt_grad_windows(const hg_table *params, const gpt_param_map *pm, int n_layer, int64_t *win_off) {
    enum { ALIGN = 16 }; /* floats: each place 64-byte aligned */
    const int b0 = pm->layer0, b1 = pm->layer0 + n_layer * pm->per_layer;
    size_t wide = 0, block = 0;
    for (int pass = 0; pass < 2; pass++) /* the model-wide tensors, then the blocks after them */
        for (int l = 0; l < (pass ? n_layer : 1); l++) {
            size_t at = 0;
            for (int i = pass ? b0 + l * pm->per_layer : 0; i < (pass ? b0 + (l + 1) * pm->per_layer : params->count); i++) {
                if (!pass && i >= b0 && i < b1) continue;
                const hg_tensor_spec *s = &params->specs[i];
                if (win_off) win_off[i] = (s->flags & HG_SPEC_FROZEN) ? -1 : (int64_t)((pass ? wide : 0) + at);
                if (!(s->flags & HG_SPEC_FROZEN)) at += ((size_t)s->numel + ALIGN - 1) / ALIGN * ALIGN;
            }
            if (pass) block = at > block ? at : block;
            else wide = at;
        }
    return wide + block;
}

/* With bf16 gradients: the windows of [first, end) added into the kept gradients (round
 * to nearest even) and zeroed. Host memory: the CPU alone keeps bf16 gradients. */
static void add_windows(const hg_model *m, int first, int end) {
    if (!m->grad_win || m->trace) return;
    for (int i = first; i < end; i++) {
        if (!gpt_trained(m, i)) continue;
        uint16_t *g = gpt_grad_kept(m, i);
        float *w = gpt_grad(m, i);
        const int64_t n = m->params.specs[i].numel;
        #pragma omp parallel for simd schedule(static) num_threads(m->threads)
        for (int64_t j = 0; j < n; j++) {
            g[j] = f32_to_bf16(bf16_to_f32(g[j]) + w[j]);
            w[j] = 0.0f;
        }
    }
}

void gpt_grad_ready(const hg_model *m, int first, int end) {
    add_windows(m, first, end);
    if (!m->grad_ready) return;
    /* trained tensors are laid out in table order: from the first of them in [first, end)
     * to the next one after end (the gaps between belong to the range), or the end */
    int i = first;
    while (i < end && !gpt_trained(m, i)) i++;
    if (i == end) return;
    size_t lo = m->params.specs[i].offset / sizeof(float), hi = m->train_bytes / sizeof(float);
    for (int k = end; k < m->params.count; k++)
        if (gpt_trained(m, k)) {
            hi = m->params.specs[k].offset / sizeof(float);
            break;
        }
    m->grad_ready(m->grad_ready_ctx, lo, hi - lo);
}

void gpt_refresh_weights(hg_model *m, size_t lo, size_t n) {
    if (m->weight == (void *)m->param) return;
    for (int i = 0; i < m->params.count; i++) {
        if (m->weights.specs[i].flags & HG_SPEC_ALIAS) continue; /* its own copy */
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

/* The bytes of buffer buf: the whole table for the parameters, the trainable ones for
 * the gradients and moments. */
static size_t buffer_bytes(const hg_model *m, const void *buf) {
    if (buf == m->param) return m->params.bytes;
    if (buf == m->grad) return m->train_bytes / sizeof(float) * gpt_grad_bytes(m);
    return m->shard_n * gpt_state_bytes(m);
}

void *gpt_host_begin(const hg_model *m, void *buf) {
    if (m->opt.device == HG_DEVICE_CPU) return buf;
    void *host = hg_aligned_alloc(buffer_bytes(m, buf));
    if (host) m->be->ops->download(m->be, host, buf, buffer_bytes(m, buf));
    return host;
}

hg_status gpt_host_end(hg_model *m, void *buf, void *host) {
    if (host != buf) m->be->ops->upload(m->be, buf, host, buffer_bytes(m, buf));
    /* the compute copy, whether the parameters were written in place (the CPU) or uploaded */
    if (buf == m->param) gpt_refresh_weights(m, 0, m->params.bytes / sizeof(float));
    hg_status st = m->be->ops->sync(m->be);
    gpt_host_free(buf, host);
    return st;
}

float *gpt_param_get(const hg_model *m, float *host, int idx) {
    float *p = gpt_param(m, host, idx);
    if (!gpt_held_bf16(m, idx)) return p;
    const int64_t n = m->params.specs[idx].numel;
    float *w = malloc(sizeof(float) * (size_t)(n ? n : 1));
    const uint16_t *h = (const uint16_t *)p;
    if (w)
        #pragma omp parallel for schedule(static) num_threads(m->threads)
        for (int64_t j = 0; j < n; j++) w[j] = bf16_to_f32(h[j]);
    return w;
}

void gpt_param_put(const hg_model *m, float *host, int idx, float *p, int store) {
    if (!p || !gpt_held_bf16(m, idx)) return;
    const int64_t n = m->params.specs[idx].numel;
    uint16_t *h = (uint16_t *)gpt_param(m, host, idx);
    if (store)
        #pragma omp parallel for schedule(static) num_threads(m->threads)
        for (int64_t j = 0; j < n; j++) h[j] = f32_to_bf16(p[j]);
    free(p);
}

/* Each site op's parameters, block by block, from its init (host holds the parameters). */
static hg_status init_site_params(hg_model *m, float *host) {
    for (int s = 0; s < HG_SITES; s++) {
        const gpt_site_def *d = &m->sites.def[s];
        if (!m->sites.on[s] || !d->op.n_params) continue;
        int layers = s == HG_SITE_FINAL_NORM ? 1 : m->d.L;
        for (int l = 0; l < layers; l++) {
            float *p[HG_OP_MAX_TENSORS] = {0};
            const int k = gpt_pi(m, l, gpt_site_role((hg_site)s));
            int staged = 1;
            for (int i = 0; i < d->op.n_params; i++) staged &= (p[i] = gpt_param_get(m, host, k + i)) != NULL;
            int layer = s == HG_SITE_FINAL_NORM ? -1 : l;
            hg_clear_error();
            hg_status st = staged ? d->op.init(d->op.ctx, &m->sites.shape[s], layer, p, m->opt.seed)
                                  : hg_fail(HG_ERR_NOMEM, "out of memory");
            for (int i = 0; i < d->op.n_params; i++) gpt_param_put(m, host, k + i, p[i], st == HG_OK);
            if (st != HG_OK)
                return hg_fail_returned(st, "op '%s' (%s, block %d): its init", d->name, hg_site_field((hg_site)s),
                                        layer);
        }
    }
    return HG_OK;
}

/* An adapter's tensor as PEFT initialises it (hg_lora_init): A uniform in +-1/sqrt(in)
 * (kaiming_uniform_ with a = sqrt(5)) or normal with std 1/r, B zero; each from a stream
 * of its own (its table index, past the built-in tensors'), so adapters change no other
 * tensor's initial values. */
static void init_lora(hg_model *m, int i, float *p) {
    const hg_tensor_spec *s = &m->params.specs[i];
    if (!strstr(s->name, ".lora_A.")) {
        memset(p, 0, sizeof(float) * (size_t)s->numel);
        return;
    }
    const int64_t K = s->shape[1];
    const float bound = 1.0f / sqrtf((float)K), std = 1.0f / (float)m->opt.lora.r;
    const int gauss = m->opt.lora.init == HG_LORA_INIT_GAUSSIAN;
    const uint32_t stream = (1u << 30) + (uint32_t)i;
    for (int64_t j = 0; j < s->numel; j++)
        p[j] = gauss ? std * hg_rng_normal(m->opt.seed, stream, (uint64_t)j) : bound * hg_rng_uniform(m->opt.seed, stream, (uint64_t)j);
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
        if (s->flags & HG_SPEC_LORA) {
            init_lora(m, i, gpt_param(m, host, i));
            continue;
        }
        if (s->flags & HG_SPEC_SITE) continue;
        const uint32_t at = stream++;
        float *p = gpt_param_get(m, host, i);
        if (!p) {
            gpt_host_free(m->param, host);
            return hg_fail(HG_ERR_NOMEM, "out of memory staging parameter %s", s->name);
        }
        int is_bias = (s->flags & HG_SPEC_BIAS) != 0, is_norm = (s->flags & HG_SPEC_NORM) && !is_bias;
        float std = s->flags & HG_SPEC_RESIDUAL ? proj_std : 0.02f;
        uint64_t seed = m->opt.seed;
        #pragma omp parallel for schedule(static) num_threads(m->threads)
        for (int64_t j = 0; j < s->numel; j++)
            p[j] = is_norm ? 1.0f : is_bias ? 0.0f : std * hg_rng_normal(seed, at, (uint64_t)j);
        gpt_param_put(m, host, i, p, 1);
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
        void *bufs[] = {m->param, m->grad, m->adam_m, m->adam_v, copy, m->act, m->grad_win, m->pos_dev};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) m->be->ops->free(m->be, bufs[i]);
        m->be->ops->destroy(m->be);
    }
    hg_table_free(&m->params);
    hg_table_free(&m->weights);
    hg_table_free(&m->acts);
    if (m->steps) gpt_trace_free(m->steps);
    free(m->steps);
    free(m->host_losses);
    free(m->pos);
    free(m->win_off);
    free(m);
}

/* For a training plan that does not fit in avail bytes: the first memory dial (recompute
 * block, bf16 moments, both, and on the CPU bf16 gradients too) under which it would, or
 * what all of them still need, into buf. */
static void dial_hint(const hg_config *cfg, const hg_options *opt, size_t avail, char *buf, size_t cap) {
    static const struct { int block, state, grads; const char *what; } dials[] = {
        {1, 0, 0, "recompute BLOCK"},
        {0, 1, 0, "optim_state BF16"},
        {1, 1, 0, "recompute BLOCK and optim_state BF16"},
        {1, 1, 1, "recompute BLOCK, optim_state BF16 and grad_precision BF16"}};
    *buf = 0;
    if (!opt->training) return;
    size_t need = 0; /* of the last dial weighed, which is all of them */
    const char *all = NULL;
    for (size_t i = 0; i < sizeof dials / sizeof dials[0]; i++) {
        if (dials[i].grads && opt->device != HG_DEVICE_CPU) continue; /* the CPU alone keeps bf16 gradients */
        hg_options o = *opt;
        if (dials[i].block) o.recompute = HG_RECOMPUTE_BLOCK;
        if (dials[i].state) o.optim_state = HG_PRECISION_BF16;
        if (dials[i].grads) o.grad_precision = HG_PRECISION_BF16;
        hg_memory_plan p;
        if (hg_memory_required(cfg, &o, &p) != HG_OK) continue; /* e.g. bf16 moments under ZeRO-1 */
        if (p.total <= avail) {
            snprintf(buf, cap, "; it would fit with %s (%.2f GiB)", dials[i].what, p.total / 1073741824.0);
            return;
        }
        need = p.total, all = dials[i].what;
    }
    hg_clear_error();
    if (all) snprintf(buf, cap, "; even with %s it needs %.2f GiB: lower batch or seq_len, or train adapters (lora)", all,
                      need / 1073741824.0);
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
    m->hf_arch = -1;
    hg_status st = hg_backend_create(&m->be, &opt, m->threads);
    if (st == HG_OK) {
        size_t avail = m->be->ops->mem_available(m->be);
        char hint[200];
        if (plan.total > avail) dial_hint(cfg, &opt, avail, hint, sizeof hint);
        if (plan.total > avail)
            st = hg_fail(HG_ERR_NOMEM, "model needs %.2f GiB (params %.2f, grads+optimizer %.2f, activations %.2f, "
                         "scratch %.2f) but only %.2f GiB of %s memory is available%s",
                         plan.total / 1073741824.0, plan.params / 1073741824.0,
                         (plan.grads + plan.optimizer) / 1073741824.0, plan.activations / 1073741824.0,
                         plan.scratch / 1073741824.0, avail / 1073741824.0, m->be->ops->name, hint);
    }
    if (st == HG_OK) {
        m->host_losses = malloc(sizeof(float) * (size_t)opt.batch * opt.seq_len);
        m->pos = malloc(sizeof(int32_t) * (size_t)opt.batch * opt.seq_len);
        if (!m->host_losses || !m->pos) st = hg_fail(HG_ERR_NOMEM, "out of memory for the loss buffer");
    }
    if (st == HG_OK && !(m->steps = calloc(1, sizeof *m->steps)))
        st = hg_fail(HG_ERR_NOMEM, "out of memory for the model's step description");
    if (st == HG_OK)
        st = gpt_build_tables(cfg, &opt, m->threads, &m->params, &m->weights, &m->acts, &m->chunk, &m->sites,
                              &m->train_bytes, m->steps);
    m->opt.freeze = NULL; /* the caller's string: the tables hold what it froze */
    if (st != HG_OK) {
        hg_model_free(m);
        return st;
    }
    m->pm = gpt_param_map_of(&m->params);
    hg_backend *be = m->be;
    gpt_shard(m->train_bytes / sizeof(float), opt.shards, opt.shard, &m->shard_lo, &m->shard_n);
    void **bufs[] = {(void **)&m->param, (void **)&m->grad, &m->adam_m, &m->adam_v};
    size_t sizes[] = {m->params.bytes, m->train_bytes / sizeof(float) * gpt_grad_bytes(m), m->shard_n * gpt_state_bytes(m),
                      m->shard_n * gpt_state_bytes(m)};
    int nbufs = opt.training ? 4 : 1;
    for (int i = 0; i < nbufs && st == HG_OK; i++) {
        *bufs[i] = be->ops->alloc(be, sizes[i] ? sizes[i] : HG_ALIGN);
        if (!*bufs[i]) st = hg_fail(HG_ERR_NOMEM, "out of memory allocating %zu bytes of parameters", sizes[i]);
        else be->ops->zero(be, *bufs[i], sizes[i]);
    }
    if (st == HG_OK && opt.training && opt.grad_precision == HG_PRECISION_BF16) { /* the gradients' fp32 windows */
        m->win_off = malloc(sizeof(int64_t) * (size_t)(m->params.count ? m->params.count : 1));
        m->win_floats = gpt_grad_windows(&m->params, &m->pm, cfg->n_layer, m->win_off);
        m->grad_win = m->win_off ? be->ops->alloc(be, m->win_floats ? m->win_floats * sizeof(float) : HG_ALIGN) : NULL;
        if (!m->grad_win) st = hg_fail(HG_ERR_NOMEM, "out of memory for %zu floats of gradient windows", m->win_floats);
        else be->ops->zero(be, m->grad_win, m->win_floats * sizeof(float));
    }
    if (st == HG_OK) {
        m->weight = opt.precision == HG_PRECISION_FP32 ? (void *)m->param : be->ops->alloc(be, m->weights.bytes);
        if (!m->weight) st = hg_fail(HG_ERR_NOMEM, "out of memory allocating %zu bytes of weights", m->weights.bytes);
    }
    if (st == HG_OK && opt.device != HG_DEVICE_CPU) { /* packed documents' positions, as the kernels read them */
        m->pos_dev = be->ops->alloc(be, sizeof(int32_t) * (size_t)opt.batch * opt.seq_len);
        if (!m->pos_dev) st = hg_fail(HG_ERR_NOMEM, "out of memory for the positions");
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
    *out = (hg_buffer_info){.name = s->name, .scratch = !(s->flags & HG_SPEC_KEPT), .copies = s->copies,
                            .bytes = (size_t)s->alloc * s->elem_size * (size_t)s->copies};
    return HG_OK;
}

_Static_assert(PROF_MAX_RD <= HG_STEP_MAX_ACCESS && PROF_MAX_WR <= HG_STEP_MAX_ACCESS, "hg_step_op holds a traced op");

int hg_step_op_count(const hg_model *m) { return m && m->steps ? m->steps->n : 0; }

hg_status hg_step_op_at(const hg_model *m, int index, hg_step_op *out) {
    if (!m || !out) return hg_fail(HG_ERR_INVALID, "hg_step_op_at: NULL argument");
    if (index < 0 || index >= hg_step_op_count(m))
        return hg_fail(HG_ERR_INVALID, "step op index %d is out of range [0, %d)", index, hg_step_op_count(m));
    const gpt_event *e = &m->steps->ev[index];
    static const char *const regions[] = {"forward", "classifier", "backward"};
    *out = (hg_step_op){.name = prof_kind_name(e->kind), .pass = e->pass, .region = regions[e->phase],
                        .layer = e->layer, .recompute = e->recompute, .flops = e->flops, .nread = e->nrd,
                        .nwrite = e->nwr};
    for (int i = 0; i < e->nrd; i++) out->read[i] = (hg_step_access){e->rd[i].buffer, e->rd[i].copy};
    for (int i = 0; i < e->nwr; i++) out->write[i] = (hg_step_access){e->wr[i].buffer, e->wr[i].copy};
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
    out->dtype = gpt_held_bf16(m, index) ? HG_PRECISION_BF16 : HG_PRECISION_FP32;
    if (out->dtype == HG_PRECISION_BF16) out->data_bf16 = (uint16_t *)gpt_param(m, m->param, index);
    else out->data = gpt_param(m, m->param, index);
    out->grad_dtype = m->opt.grad_precision;
    if (m->grad && out->grad_dtype == HG_PRECISION_BF16) out->grad_bf16 = gpt_grad_kept(m, index);
    else if (m->grad) out->grad = gpt_grad_kept(m, index);
    out->state_dtype = m->opt.optim_state;
    if (m->grad && m->opt.shards == 1 && gpt_trained(m, index)) {
        size_t at = m->params.specs[index].offset / sizeof(float);
        void *mo = gpt_moment_at(m, m->adam_m, at), *vo = gpt_moment_at(m, m->adam_v, at);
        if (out->state_dtype == HG_PRECISION_BF16) out->adam_m_bf16 = mo, out->adam_v_bf16 = vo;
        else out->adam_m = mo, out->adam_v = vo;
    }
    out->decay = (s->flags & HG_SPEC_DECAY) != 0;
    out->frozen = (s->flags & HG_SPEC_FROZEN) != 0;
    out->device = m->opt.device;
    return HG_OK;
}

hg_status hg_param_find(const hg_model *m, const char *name, hg_param_info *out) {
    if (!m || !name) return hg_fail(HG_ERR_INVALID, "hg_param_find: NULL argument");
    int i = hg_table_find(&m->params, name);
    if (i < 0) return hg_fail(HG_ERR_INVALID, "no parameter named '%s'", name);
    return hg_param_at(m, i, out);
}

/* *out = tensor `index` of the buffer holding `part` (a moment's: the buffer itself). */
static hg_status param_part(const hg_model *m, int index, hg_param_part part, const void *host, void **out) {
    if (!m || !host) return hg_fail(HG_ERR_INVALID, "hg_param_read/write: NULL argument");
    if (index < 0 || index >= m->params.count)
        return hg_fail(HG_ERR_INVALID, "parameter index %d is out of range [0, %d)", index, m->params.count);
    if ((unsigned)part > HG_PARAM_ADAM_V) return hg_fail(HG_ERR_INVALID, "part %d is not an hg_param_part", (int)part);
    void *bufs[] = {m->param, m->grad, m->adam_m, m->adam_v};
    if (!bufs[part]) return hg_fail(HG_ERR_STATE, "this model was created with training=0: it has no gradients or moments");
    if (part != HG_PARAM_DATA && !gpt_trained(m, index))
        return hg_fail(HG_ERR_STATE, "parameter '%s' is frozen: it has no gradient or moments", m->params.specs[index].name);
    if (part >= HG_PARAM_ADAM_M && m->opt.shards > 1)
        return hg_fail(HG_ERR_STATE, "this model holds 1/%d of the AdamW state (ZeRO-1): use hg_dist_optimizer_get/set",
                       m->opt.shards);
    *out = part >= HG_PARAM_ADAM_M ? bufs[part] : part == HG_PARAM_GRAD ? gpt_grad_kept(m, index)
                                                                         : gpt_param(m, bufs[part], index);
    return HG_OK;
}

/* n bf16 elements at dev move through a bf16 buffer of their own: read widens them into
 * host, write rounds host into them (to nearest even). */
static hg_status bf16_io(const hg_model *m, void *dev, size_t n, float *host, int write) {
    uint16_t *b = malloc(2 * (n ? n : 1));
    if (!b) return hg_fail(HG_ERR_NOMEM, "out of memory staging %zu bf16 values", n);
    if (write) {
        for (size_t j = 0; j < n; j++) b[j] = f32_to_bf16(host[j]);
        m->be->ops->upload(m->be, dev, b, 2 * n);
    } else {
        m->be->ops->download(m->be, b, dev, 2 * n);
    }
    hg_status st = m->be->ops->sync(m->be);
    for (size_t j = 0; !write && st == HG_OK && j < n; j++) host[j] = bf16_to_f32(b[j]);
    free(b);
    return st;
}

hg_status hg_param_read(const hg_model *m, int index, hg_param_part part, float *host) {
    void *src = NULL;
    HG_TRY(param_part(m, index, part, host, &src));
    const hg_tensor_spec *s = &m->params.specs[index];
    if (part >= HG_PARAM_ADAM_M) return gpt_moments_io(m, src, s->offset / sizeof(float), (size_t)s->numel, host, 0);
    if ((part == HG_PARAM_DATA && gpt_held_bf16(m, index)) || (part == HG_PARAM_GRAD && gpt_grad_bytes(m) == 2))
        return bf16_io(m, src, (size_t)s->numel, host, 0);
    m->be->ops->download(m->be, host, src, sizeof(float) * (size_t)m->params.specs[index].numel);
    return m->be->ops->sync(m->be);
}

hg_status hg_param_write(hg_model *m, int index, hg_param_part part, const float *host) {
    void *dst = NULL;
    HG_TRY(param_part(m, index, part, host, &dst));
    const hg_tensor_spec *s = &m->params.specs[index];
    if (part >= HG_PARAM_ADAM_M) return gpt_moments_io(m, dst, s->offset / sizeof(float), (size_t)s->numel, (float *)host, 1);
    if ((part == HG_PARAM_DATA && gpt_held_bf16(m, index)) || (part == HG_PARAM_GRAD && gpt_grad_bytes(m) == 2))
        return bf16_io(m, dst, (size_t)s->numel, (float *)host, 1);
    m->be->ops->upload(m->be, dst, host, sizeof(float) * (size_t)m->params.specs[index].numel);
    if (part == HG_PARAM_DATA) gpt_refresh_weights(m, m->params.specs[index].offset / sizeof(float), (size_t)m->params.specs[index].numel);
    return m->be->ops->sync(m->be);
}

hg_status gpt_moments_io(const hg_model *m, void *buf, size_t lo, size_t n, float *host, int write) {
    void *at = gpt_moment_at(m, buf, lo);
    if (gpt_state_bytes(m) == 2) return bf16_io(m, at, n, host, write);
    if (write) m->be->ops->upload(m->be, at, host, n * sizeof(float));
    else m->be->ops->download(m->be, host, at, n * sizeof(float));
    return m->be->ops->sync(m->be);
}

hg_status gpt_moments_set(hg_model *m, int i, const float *mo, const float *vo) {
    const hg_tensor_spec *s = &m->params.specs[i];
    size_t lo = s->offset / sizeof(float), hi = lo + (size_t)s->numel;
    size_t a = lo > m->shard_lo ? lo : m->shard_lo, b = hi < m->shard_lo + m->shard_n ? hi : m->shard_lo + m->shard_n;
    if (b <= a) return HG_OK;
    HG_TRY(gpt_moments_io(m, m->adam_m, a, b - a, (float *)mo + (a - lo), 1));
    return gpt_moments_io(m, m->adam_v, a, b - a, (float *)vo + (a - lo), 1);
}

hg_status hg_set_grad_ready_hook(hg_model *m, hg_grad_ready_fn *fn, void *ctx) {
    if (!m) return hg_fail(HG_ERR_INVALID, "hg_set_grad_ready_hook: NULL model");
    if (fn && !m->opt.training) return hg_fail(HG_ERR_STATE, "this model was created with training=0: it has no backward");
    m->grad_ready = fn;
    m->grad_ready_ctx = fn ? ctx : NULL;
    return HG_OK;
}

/* 1 when a and b lay their parameters out alike (the same tensors at the same offsets). */
static int same_layout(const hg_table *a, const hg_table *b) {
    if (a->count != b->count || a->bytes != b->bytes) return 0;
    for (int i = 0; i < a->count; i++)
        if (a->specs[i].offset != b->specs[i].offset || a->specs[i].elem_size != b->specs[i].elem_size ||
            strcmp(a->specs[i].name, b->specs[i].name))
            return 0;
    return 1;
}

hg_status hg_model_copy_params(hg_model *dst, const hg_model *src) {
    if (!dst || !src) return hg_fail(HG_ERR_INVALID, "hg_model_copy_params: NULL model");
    char why[256];
    if (!gpt_same_architecture(&dst->cfg, &src->cfg, why, sizeof why))
        return hg_fail(HG_ERR_INVALID, "hg_model_copy_params: the models' configs differ: %s", why);
    /* Through host memory when neither model is on the CPU; then dst's compute copy. The
     * same table: one copy. Otherwise (adapters, frozen tensors laid out last) tensor by
     * tensor, by name: a tensor only one of them has (an adapter) is left as it was. */
    hg_backend *sb = src->be;
    float *s_host = gpt_host_begin(src, src->param), *d_host = s_host ? gpt_host_begin(dst, dst->param) : NULL;
    if (!s_host || !d_host) {
        if (s_host) gpt_host_free(src->param, s_host);
        return hg_fail(HG_ERR_NOMEM, "out of memory staging %zu bytes of parameters", src->params.bytes);
    }
    hg_status st = sb->ops->sync(sb);
    if (st == HG_OK && same_layout(&dst->params, &src->params)) memcpy(d_host, s_host, src->params.bytes);
    else
        for (int i = 0; st == HG_OK && i < dst->params.count; i++) {
            int k = hg_table_find(&src->params, dst->params.specs[i].name);
            if (k < 0) continue;
            float *from = gpt_param_get(src, s_host, k), *to = from ? gpt_param_get(dst, d_host, i) : NULL;
            if (to) memcpy(to, from, sizeof(float) * (size_t)src->params.specs[k].numel);
            else st = hg_fail(HG_ERR_NOMEM, "out of memory staging parameter %s", src->params.specs[k].name);
            gpt_param_put(src, s_host, k, from, 0);
            gpt_param_put(dst, d_host, i, to, 1);
        }
    gpt_host_free(src->param, s_host);
    if (st == HG_OK) st = gpt_host_end(dst, dst->param, d_host); /* uploads and refreshes the compute copy */
    else gpt_host_free(dst->param, d_host);
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
