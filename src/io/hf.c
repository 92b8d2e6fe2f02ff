/* Hugging Face folders: the weights of model.safetensors (or of the shards an index
 * names) into a model, and the export of a model (and tokenizer) as such a folder.
 *
 * A recipe maps each handgrad parameter to the Hugging Face tensors it is made of.
 * GPT-2 keeps handgrad's own names and Conv1D layouts (in, out), with or without
 * "transformer.". The Llama family stores nn.Linear weights (out, in), with q, k and v
 * (and gate and up) as separate tensors (Phi-3: one each); handgrad's fused (in, out)
 * matrix is those parts stacked along their first axis and transposed. Gemma's norms
 * compute x * rstd * (1 + w) and store w: handgrad folds the 1 in at load and takes it
 * out at export. The mapping is in docs/formats.md. */
#include "io/hf.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "data/fileio.h"
#include "io/atomic.h"
#include "model/gpt.h"

#define PREFIX "transformer."
#define HF_INDEX "model.safetensors.index.json"

/* ---- the tensors of a folder ---- */

typedef struct hf_entry {
    const char *name;
    const hg_st_tensor *t;
    int file;
    int used;
} hf_entry;

struct hf_tensors {
    int n_files;
    hg_st_file **files;
    char **paths; /* the files as messages name them */
    hf_entry *all; /* sorted by name */
    int n;
    cJSON *index;
};

void hf_tensors_close(hf_tensors *t) {
    if (!t) return;
    for (int i = 0; i < t->n_files; i++) {
        hg_st_close(t->files[i]);
        free(t->paths[i]);
    }
    free(t->files);
    free(t->paths);
    free(t->all);
    cJSON_Delete(t->index);
    free(t);
}

static int cmp_entry(const void *a, const void *b) { return strcmp(((const hf_entry *)a)->name, ((const hf_entry *)b)->name); }

static hf_entry *find(const hf_tensors *t, const char *name) {
    hf_entry key = {.name = name};
    return bsearch(&key, t->all, (size_t)t->n, sizeof key, cmp_entry);
}

int hf_tensors_count(const hf_tensors *t) { return t->n; }
const hg_st_tensor *hf_tensors_at(const hf_tensors *t, int i) { return i >= 0 && i < t->n ? t->all[i].t : NULL; }
const hg_st_tensor *hf_tensors_find(const hf_tensors *t, const char *name) {
    const hf_entry *e = find(t, name);
    return e ? e->t : NULL;
}

/* Opens (or, from memory, parses) file i of the set. */
typedef hg_status (*open_fn)(void *ctx, int i, const char *path, hg_st_file **out);

/* A shard's name from the index: a plain file name in the folder. */
static hg_status check_shard_name(const char *index, const char *tensor, const cJSON *v) {
    const char *s = cJSON_GetStringValue(v);
    if (!s || !*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, ".."))
        return hg_fail(HG_ERR_FORMAT, "%s: weight_map['%.80s'] must be a file name in the folder", index, tensor);
    return HG_OK;
}

/* Builds the set: index NULL means one file, model.safetensors. */
/* Opens the files of dir: the shards index names, or the one file `single`. */
static hg_status build(hf_tensors *t, const char *dir, const char *single, const char *index_name, cJSON *index,
                       open_fn open, void *ctx) {
    const cJSON *map = NULL;
    int n_names = 1;
    if (index) {
        map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
        if (!cJSON_IsObject(index) || !cJSON_IsObject(map))
            return hg_fail(HG_ERR_FORMAT, "%s: field 'weight_map' (tensor name -> shard file) is missing", index_name);
        n_names = cJSON_GetArraySize(map);
    }
    t->files = calloc((size_t)n_names + 1, sizeof *t->files);
    t->paths = calloc((size_t)n_names + 1, sizeof *t->paths);
    if (!t->files || !t->paths) return hg_fail(HG_ERR_NOMEM, "out of memory");
    /* the distinct shard names, in order of first mention */
    for (const cJSON *it = map ? map->child : NULL; it || !t->n_files; it = it ? it->next : NULL) {
        const char *shard = single;
        if (it) {
            HG_TRY(check_shard_name(index_name, it->string, it));
            shard = it->valuestring;
        }
        int seen = 0;
        for (int i = 0; i < t->n_files && !seen; i++) seen = !strcmp(strrchr(t->paths[i], '/') + 1, shard);
        if (!seen) {
            size_t n = strlen(dir) + strlen(shard) + 2;
            char *path = malloc(n);
            if (!path) return hg_fail(HG_ERR_NOMEM, "out of memory");
            snprintf(path, n, "%s/%s", dir, shard);
            t->paths[t->n_files] = path;
            hg_status st = open(ctx, t->n_files, path, &t->files[t->n_files]);
            t->n_files++; /* closed (a NULL file too) and freed with the set */
            if (st != HG_OK && index) {
                char why[512];
                snprintf(why, sizeof why, "%s", hg_last_error());
                return hg_fail(st, "%s names shard %s: %s", index_name, shard, why);
            }
            HG_TRY(st);
        }
        if (!map) break;
    }
    for (int i = 0; i < t->n_files; i++) t->n += hg_st_count(t->files[i]);
    t->all = calloc((size_t)t->n + 1, sizeof *t->all);
    if (!t->all) return hg_fail(HG_ERR_NOMEM, "out of memory");
    int k = 0;
    for (int i = 0; i < t->n_files; i++)
        for (int j = 0; j < hg_st_count(t->files[i]); j++) {
            const hg_st_tensor *x = hg_st_at(t->files[i], j);
            t->all[k++] = (hf_entry){x->name, x, i, 0};
        }
    qsort(t->all, (size_t)t->n, sizeof *t->all, cmp_entry);
    for (int i = 1; i < t->n; i++)
        if (!strcmp(t->all[i].name, t->all[i - 1].name))
            return hg_fail(HG_ERR_FORMAT, "%s and %s both hold tensor '%s'", t->paths[t->all[i - 1].file],
                           t->paths[t->all[i].file], t->all[i].name);
    /* the index and the shards must agree, tensor for tensor */
    for (const cJSON *it = map ? map->child : NULL; it; it = it->next) {
        const hf_entry *e = find(t, it->string);
        if (!e || strcmp(strrchr(t->paths[e->file], '/') + 1, it->valuestring))
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%.80s' is in no shard: %s/%s does not hold it", index_name,
                           it->string, dir, it->valuestring);
    }
    if (map && n_names != t->n)
        for (int i = 0; i < t->n; i++)
            if (!cJSON_GetObjectItemCaseSensitive(map, t->all[i].name))
                return hg_fail(HG_ERR_FORMAT, "%s: holds tensor '%s', which %s does not list", t->paths[t->all[i].file],
                               t->all[i].name, index_name);
    return HG_OK;
}

static hg_status open_file(void *ctx, int i, const char *path, hg_st_file **out) {
    (void)ctx, (void)i;
    return hg_st_open(out, path);
}

hg_status hf_tensors_open(hf_tensors **out, const char *dir) {
    *out = NULL;
    hf_tensors *t = calloc(1, sizeof *t);
    size_t n = strlen(dir) + sizeof HF_INDEX + 2;
    char *index_path = malloc(n);
    if (!t || !index_path) {
        free(t), free(index_path);
        return hg_fail(HG_ERR_NOMEM, "out of memory");
    }
    snprintf(index_path, n, "%s/" HF_INDEX, dir);
    hg_status st = HG_OK;
    if (access(index_path, F_OK) == 0) {
        uint8_t *text;
        size_t len;
        st = file_read_all(index_path, &text, &len);
        if (st == HG_OK) {
            t->index = cJSON_ParseWithLength((const char *)text, len);
            free(text);
            if (!t->index) st = hg_fail(HG_ERR_FORMAT, "%s: not valid JSON", index_path);
        }
    }
    if (st == HG_OK) st = build(t, dir, "model.safetensors", index_path, t->index, open_file, NULL);
    free(index_path);
    if (st != HG_OK) {
        hf_tensors_close(t);
        return st;
    }
    *out = t;
    return HG_OK;
}

hg_status hf_tensors_open_file(hf_tensors **out, const char *path) {
    *out = NULL;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    hf_tensors *t = calloc(1, sizeof *t);
    hg_status st = t && dir ? build(t, dir, slash ? slash + 1 : path, NULL, NULL, open_file, NULL)
                            : hg_fail(HG_ERR_NOMEM, "out of memory");
    free(dir);
    if (st != HG_OK) {
        hf_tensors_close(t);
        return st;
    }
    *out = t;
    return HG_OK;
}

typedef struct mem_ctx {
    const char *const *names;
    const uint8_t *const *bufs;
    const size_t *lens;
    int n;
} mem_ctx;

static hg_status open_mem(void *ctx, int i, const char *path, hg_st_file **out) {
    const mem_ctx *c = ctx;
    (void)i;
    const char *base = strrchr(path, '/') + 1;
    for (int k = 0; k < c->n; k++)
        if (!strcmp(c->names[k], base)) return hg_st_parse(out, path, c->bufs[k], c->lens[k]);
    return hg_fail(HG_ERR_IO, "%s: cannot open for reading", path);
}

hg_status hf_tensors_parse(hf_tensors **out, const char *index_name, const char *index, size_t index_len,
                           const char *const *names, const uint8_t *const *bufs, const size_t *lens, int n) {
    *out = NULL;
    hf_tensors *t = calloc(1, sizeof *t);
    if (!t) return hg_fail(HG_ERR_NOMEM, "out of memory");
    hg_status st = HG_OK;
    if (index && !(t->index = cJSON_ParseWithLength(index, index_len)))
        st = hg_fail(HG_ERR_FORMAT, "%s: not valid JSON", index_name);
    mem_ctx c = {names, bufs, lens, n};
    if (st == HG_OK) st = build(t, ".", "model.safetensors", index_name, t->index, open_mem, &c);
    if (st != HG_OK) {
        hf_tensors_close(t);
        return st;
    }
    *out = t;
    return HG_OK;
}

/* ---- recipes ---- */

typedef struct hf_recipe {
    int transpose; /* the parts are nn.Linear weights (out, in) */
    float offset;  /* handgrad's value = the file's + offset (Gemma's norm weights: 1) */
    int n;         /* parts, stacked along their first axis */
    char names[2][3][112]; /* [0]: the name; [1]: an alternative (GPT-2 without "transformer.") */
    int64_t rows[3]; /* each part's first dimension */
} hf_recipe;

/* A Llama-family name "model.layers.{l}.<suffix>" or "<name>" for part i. */
static void part(hf_recipe *r, int i, int layer, const char *name, int64_t rows) {
    if (layer >= 0) snprintf(r->names[0][i], sizeof r->names[0][i], "model.layers.%d.%s", layer, name);
    else snprintf(r->names[0][i], sizeof r->names[0][i], "%s", name);
    r->names[1][i][0] = 0;
    r->rows[i] = rows;
    r->n = i + 1;
}

/* The recipe of parameter k (role, layer) for architecture a; 0 when a has no such
 * tensor (hf_arch_cannot rules such configs out first). */
static int recipe_of(const hg_model *m, hf_arch a, int k, gpt_role role, int l, hf_recipe *r) {
    hg_param_info p;
    hg_param_at((hg_model *)m, k, &p);
    memset(r, 0, sizeof *r);
    if (a == HF_GPT2 && role == R_LM_HEAD) {
        part(r, 0, -1, "lm_head.weight", p.shape[0]);
        return 1;
    }
    if (a == HF_GPT2) {
        snprintf(r->names[0][0], sizeof r->names[0][0], PREFIX "%s", p.name);
        snprintf(r->names[1][0], sizeof r->names[1][0], "%s", p.name);
        r->rows[0] = p.shape[0];
        r->n = 1;
        return 1;
    }
    const gpt_dims d = m->d;
    const int gemma2 = a == HF_GEMMA2, phi3 = a == HF_PHI3, phi = a == HF_PHI;
    switch (role) {
    case R_WTE: part(r, 0, -1, "model.embed_tokens.weight", d.V); break;
    case R_LNF_W: part(r, 0, -1, phi ? "model.final_layernorm.weight" : "model.norm.weight", d.C); break;
    case R_LNF_B: part(r, 0, -1, "model.final_layernorm.bias", d.C); break; /* Phi-2's */
    case R_LM_HEAD: part(r, 0, -1, "lm_head.weight", d.V); break;
    case R_LM_HEAD_B: part(r, 0, -1, "lm_head.bias", d.V); break;
    case R_LN1_W: part(r, 0, l, "input_layernorm.weight", d.C); break;
    case R_LN1_B: part(r, 0, l, "input_layernorm.bias", d.C); break;
    case R_POST1_W: part(r, 0, l, "post_attention_layernorm.weight", d.C); break; /* Gemma 2, OLMo 2: on the output */
    case R_LN2_W: part(r, 0, l, gemma2 ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight", d.C); break;
    case R_POST2_W: part(r, 0, l, "post_feedforward_layernorm.weight", d.C); break;
    case R_QNORM_W: part(r, 0, l, "self_attn.q_norm.weight", p.shape[0]); break; /* hs, or QD (OLMo 2) */
    case R_KNORM_W: part(r, 0, l, "self_attn.k_norm.weight", p.shape[0]); break;
    case R_QKV_W:
    case R_QKV_B: {
        const char *sfx = role == R_QKV_W ? "weight" : "bias";
        char n[64];
        const char *proj[] = {"q_proj", "k_proj", "v_proj"};
        const int64_t rows[] = {d.QD, d.KVD, d.KVD};
        for (int i = 0; i < 3; i++) {
            snprintf(n, sizeof n, "self_attn.%s.%s", proj[i], sfx);
            part(r, i, l, n, rows[i]);
        }
        if (phi3) part(r, 0, l, role == R_QKV_W ? "self_attn.qkv_proj.weight" : "self_attn.qkv_proj.bias", d.QKV);
        r->transpose = role == R_QKV_W;
        break;
    }
    case R_PROJ_W: part(r, 0, l, phi ? "self_attn.dense.weight" : "self_attn.o_proj.weight", d.C), r->transpose = 1; break;
    case R_PROJ_B: part(r, 0, l, phi ? "self_attn.dense.bias" : "self_attn.o_proj.bias", d.C); break;
    case R_FC_W:
        if (phi) part(r, 0, l, "mlp.fc1.weight", d.FI);
        else if (phi3) part(r, 0, l, "mlp.gate_up_proj.weight", d.FI);
        else part(r, 0, l, "mlp.gate_proj.weight", d.F), part(r, 1, l, "mlp.up_proj.weight", d.F);
        r->transpose = 1;
        break;
    case R_FC_B:
        if (phi) part(r, 0, l, "mlp.fc1.bias", d.FI);
        else part(r, 0, l, "mlp.gate_proj.bias", d.F), part(r, 1, l, "mlp.up_proj.bias", d.F);
        break;
    case R_FCPROJ_W: part(r, 0, l, phi ? "mlp.fc2.weight" : "mlp.down_proj.weight", d.C), r->transpose = 1; break;
    case R_FCPROJ_B: part(r, 0, l, phi ? "mlp.fc2.bias" : "mlp.down_proj.bias", d.C); break;
    default: return 0; /* wpe: GPT-2 only */
    }
    if ((a == HF_GEMMA || gemma2) && (m->params.specs[k].flags & HG_SPEC_NORM)) r->offset = 1.0f;
    return 1;
}

int hf_param_names(const hg_model *m, hf_arch a, int k, char (*names)[112]) {
    const hg_tensor_spec *s = &m->params.specs[k];
    hf_recipe r;
    if (s->role >= R_LORA_QKV || !recipe_of(m, a, k, (gpt_role)s->role, s->layer, &r)) return 0;
    for (int i = 0; i < r.n; i++) snprintf(names[i], sizeof names[i], "%s", r.names[0][i]);
    return r.n;
}

int hf_lora_modules(const hg_model *m, hf_arch a, hg_lora_group g, int layer, char (*names)[112]) {
    static const gpt_role weight[HG_LORA_GROUPS] = {R_QKV_W, R_PROJ_W, R_FC_W, R_FCPROJ_W};
    hf_recipe r;
    const int k = gpt_pi(m, layer, weight[g]);
    if (k < 0 || !recipe_of(m, a, k, weight[g], layer, &r)) return 0;
    for (int i = 0; i < r.n; i++) {
        snprintf(names[i], sizeof names[i], "%s", r.names[0][i]);
        char *dot = strrchr(names[i], '.');
        if (dot && !strcmp(dot, ".weight")) *dot = 0;
    }
    return r.n;
}

/* Calls fn for every parameter of m with its role and layer. */
typedef hg_status (*param_fn)(void *ctx, int k, gpt_role role, int layer);
static hg_status each_param(const hg_model *m, param_fn fn, void *ctx) {
    for (int role = 0; role < R_LORA_QKV; role++) /* the adapters are a PEFT folder's (io/peft.c) */
        for (int l = 0; l < (role < GPT_FIRST_LAYER_ROLE ? 1 : m->d.L); l++) {
            int k = gpt_pi(m, l, (gpt_role)role);
            if (k >= 0) HG_TRY(fn(ctx, k, (gpt_role)role, l));
        }
    return HG_OK;
}

/* ---- load ---- */

static void shape_str(char *buf, size_t cap, const int64_t *shape, int ndim) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++) at += (size_t)snprintf(buf + at, cap - at, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* Converts src (rows, cols) into columns [col0, col0 + rows) of dst (cols, ld): the
 * transpose, in square tiles so that both sides stay in cache, each tile by 8 x 8
 * register transposes (hg_st_convert_f32_transposed). */
static void convert_transposed(const hg_st_tensor *src, int64_t rows, int64_t cols, float *dst, int64_t ld,
                               int64_t col0, int threads) {
    enum { TILE = 64 };
    const int64_t tr = (rows + TILE - 1) / TILE, tc = (cols + TILE - 1) / TILE;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t tile = 0; tile < tr * tc; tile++) {
        const int64_t r0 = tile / tc * TILE, c0 = tile % tc * TILE;
        const int64_t nr = rows - r0 < TILE ? rows - r0 : TILE, nc = cols - c0 < TILE ? cols - c0 : TILE;
        hg_st_convert_f32_transposed(src, cols, r0, nr, c0, nc, dst + c0 * ld + col0 + r0, ld);
    }
}

static void convert_flat(const hg_st_tensor *src, float *dst, int threads) {
    enum { CHUNK = 1 << 16 };
    const int64_t n = src->numel, chunks = (n + CHUNK - 1) / CHUNK;
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t c = 0; c < chunks; c++)
        hg_st_convert_f32_stream(src, c * CHUNK, n - c * CHUNK < CHUNK ? n - c * CHUNK : CHUNK, dst + c * CHUNK);
}

typedef struct load_ctx {
    hg_model *m;
    hf_arch a;
    hf_tensors *t;
    float *host; /* NULL: check names, dtypes and shapes only */
} load_ctx;

/* Finds part i of r, marking it used. */
static hg_status find_part(load_ctx *c, const hf_recipe *r, int i, hf_entry **out) {
    hf_entry *e = find(c->t, r->names[0][i]), *alt = r->names[1][i][0] ? find(c->t, r->names[1][i]) : NULL;
    if (e && alt)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' appears twice (with and without '" PREFIX "')",
                       c->t->paths[alt->file], r->names[1][i]);
    if (!e) e = alt;
    if (!e)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is missing", c->t->n_files == 1 ? c->t->paths[0] : "the shards",
                       r->names[1][i][0] ? r->names[1][i] : r->names[0][i]);
    const hg_st_tensor *x = e->t;
    if (x->dtype != HG_ST_F32 && x->dtype != HG_ST_F16 && x->dtype != HG_ST_BF16 && x->dtype != HG_ST_F64)
        return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has dtype %s; weights must be F32, F16, BF16 or F64",
                       c->t->paths[e->file], x->name, hg_st_dtype_name(x->dtype));
    e->used = 1;
    *out = e;
    return HG_OK;
}

/* The parts of recipe r into dst (fp32, the parameter p's layout), or checked only when
 * dst is NULL. */
static hg_status load_parts(load_ctx *c, const hf_recipe *r, const hg_param_info *p, float *dst) {
    int64_t off = 0;
    for (int i = 0; i < r->n; i++) {
        hf_entry *e = NULL;
        HG_TRY(find_part(c, r, i, &e));
        /* the part's expected shape: its rows, then the parameter's other dimension */
        int64_t want[2] = {r->rows[i], r->transpose ? p->shape[0] : p->ndim > 1 ? p->shape[1] : 0};
        int want_ndim = r->transpose ? 2 : p->ndim;
        if (e->t->ndim != want_ndim || memcmp(e->t->shape, want, sizeof(int64_t) * (size_t)want_ndim)) {
            char got[96], exp[96];
            shape_str(got, sizeof got, e->t->shape, e->t->ndim);
            shape_str(exp, sizeof exp, want, want_ndim);
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' has shape %s but the config implies %s",
                           c->t->paths[e->file], e->t->name, got, exp);
        }
        double v;
        int64_t bad = dst ? -1 : hg_st_find_nonfinite(e->t, &v, c->m->threads); /* checked before anything is copied */
        if (bad >= 0)
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' holds %g at element %lld; weights must be finite",
                           c->t->paths[e->file], e->t->name, v, (long long)bad);
        if (!dst) ; /* checking only */
        else if (r->transpose) convert_transposed(e->t, want[0], want[1], dst, p->shape[1], off, c->m->threads);
        else convert_flat(e->t, dst + off * (p->ndim > 1 ? p->shape[1] : 1), c->m->threads);
        for (int64_t x = 0; dst && r->offset != 0.0f && x < e->t->numel; x++) dst[off + x] += r->offset; /* 1-D norms */
        off += r->rows[i];
    }
    return HG_OK;
}

static hg_status load_param(void *ctx, int k, gpt_role role, int l) {
    load_ctx *c = ctx;
    hf_recipe r;
    if (!recipe_of(c->m, c->a, k, role, l, &r))
        return hg_fail(HG_ERR_UNSUPPORTED, "%s has no tensor for parameter %s", hf_arch_class(c->a),
                       c->m->params.specs[k].name);
    hg_param_info p;
    hg_param_at(c->m, k, &p);
    float *dst = c->host ? gpt_param_get(c->m, c->host, k) : NULL;
    if (c->host && !dst) return hg_fail(HG_ERR_NOMEM, "out of memory staging %s", c->m->params.specs[k].name);
    hg_status st = load_parts(c, &r, &p, dst);
    gpt_param_put(c->m, c->host, k, dst, st == HG_OK);
    return st;
}

/* GPT2Attention's causal-mask buffers (h.N.attn.bias, h.N.attn.masked_bias) and the
 * rotary frequencies older Llama checkpoints stored: derived, not weights. */
static int is_buffer(const char *n) {
    if (!strncmp(n, PREFIX, strlen(PREFIX))) n += strlen(PREFIX);
    int layer, end = 0;
    char rest[32];
    if (sscanf(n, "h.%d.attn.%31s%n", &layer, rest, &end) == 2 && !n[end])
        return !strcmp(rest, "bias") || !strcmp(rest, "masked_bias");
    end = 0;
    return sscanf(n, "model.layers.%d.self_attn.rotary_emb.%31s%n", &layer, rest, &end) == 2 && !n[end] &&
           !strcmp(rest, "inv_freq");
}

/* A tied model's lm_head.weight, when a file has one, must equal the file's embedding:
 * compared in the files, before anything is written. */
static hg_status check_tied_head(load_ctx *c) {
    hf_entry *e = find(c->t, "lm_head.weight"), *w = NULL;
    if (!e || c->m->cfg.untied) return HG_OK;
    e->used = 1;
    const int k = gpt_pi(c->m, -1, R_WTE);
    hg_param_info wte;
    hg_param_at(c->m, k, &wte);
    if (e->t->ndim != 2 || e->t->shape[0] != wte.shape[0] || e->t->shape[1] != wte.shape[1])
        return hg_fail(HG_ERR_FORMAT, "%s: lm_head.weight's shape differs from the token embedding's",
                       c->t->paths[e->file]);
    hf_recipe r;
    if (!recipe_of(c->m, c->a, k, R_WTE, -1, &r) || r.n != 1 || r.transpose)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: the token embedding is not one tensor", hf_arch_class(c->a));
    HG_TRY(find_part(c, &r, 0, &w));
    enum { CHUNK = 1 << 16 };
    float *a = malloc(sizeof(float) * 2 * CHUNK), *b = a + CHUNK;
    if (!a) return hg_fail(HG_ERR_NOMEM, "out of memory");
    int same = 1;
    for (int64_t at = 0; same && at < wte.numel; at += CHUNK) {
        int64_t n = wte.numel - at < CHUNK ? wte.numel - at : CHUNK;
        hg_st_convert_f32(e->t, at, n, a);
        hg_st_convert_f32(w->t, at, n, b);
        same = !memcmp(a, b, sizeof(float) * (size_t)n);
    }
    free(a);
    return same ? HG_OK
                : hg_fail(HG_ERR_UNSUPPORTED, "%s: lm_head.weight differs from the token embedding, but the config "
                                              "says tie_word_embeddings",
                          c->t->paths[e->file]);
}

/* Every parameter's tensors are there with the right dtype and shape, and no other
 * tensor is (GPT-2's mask buffers and a tied model's lm_head, equal to the embedding,
 * aside). */
static hg_status check_names(hg_model *m, hf_arch a, hf_tensors *t) {
    for (int i = 0; i < t->n; i++) t->all[i].used = 0;
    load_ctx c = {m, a, t, NULL};
    HG_TRY(each_param(m, load_param, &c));
    HG_TRY(check_tied_head(&c));
    for (int i = 0; i < t->n; i++)
        if (!t->all[i].used && !is_buffer(t->all[i].name) && (m->cfg.untied || strcmp(t->all[i].name, "lm_head.weight")))
            return hg_fail(HG_ERR_FORMAT, "%s: tensor '%s' is not a parameter of the configured model (n_layer=%d%s)",
                           t->paths[t->all[i].file], t->all[i].name, m->cfg.n_layer,
                           strcmp(t->all[i].name, "lm_head.weight") ? "" : ", tied");
    return HG_OK;
}

hg_status hf_load_weights(hg_model *m, hf_arch a, hf_tensors *t) {
    const char *field = hf_arch_cannot(a, &m->cfg);
    if (field) return hg_fail(HG_ERR_UNSUPPORTED, "%s cannot hold this model: its %s", hf_arch_class(a), field);
    HG_TRY(check_names(m, a, t)); /* before anything is written: a refused file leaves m as it was */
    float *host = gpt_host_begin(m, m->param);
    if (!host) return hg_fail(HG_ERR_NOMEM, "out of memory staging the weights");
    load_ctx c = {m, a, t, host};
    hg_status st = each_param(m, load_param, &c);
    if (st == HG_OK) return gpt_host_end(m, m->param, host);
    gpt_host_free(m->param, host);
    return st;
}

hg_status hg_model_load_hf(hg_model **out, const char *dir, const hg_options *opt) {
    if (!out || !dir || !opt) return hg_fail(HG_ERR_INVALID, "hg_model_load_hf: NULL argument");
    *out = NULL;
    size_t n = strlen(dir) + 32;
    char *path = malloc(n);
    if (!path) return hg_fail(HG_ERR_NOMEM, "out of memory");
    hg_config cfg;
    hf_arch a;
    snprintf(path, n, "%s/config.json", dir);
    hg_status st = hf_config_load(path, &cfg, &a);
    free(path);
    hf_tensors *t = NULL;
    if (st == HG_OK) st = hf_tensors_open(&t, dir);
    hg_model *m = NULL;
    if (st == HG_OK) st = hg_model_create(&m, &cfg, opt);
    if (st == HG_OK) st = hf_load_weights(m, a, t);
    if (st == HG_OK) m->hf_arch = (int)a;
    hf_tensors_close(t);
    if (st != HG_OK) {
        hg_model_free(m);
        return st;
    }
    *out = m;
    return HG_OK;
}

/* ---- export ---- */

/* float to bfloat16, rounded to nearest even (NaN stays a quiet NaN). */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

typedef struct save_ctx {
    const hg_model *m;
    hf_arch a;
    int bf16;
    const float *host;
    hg_st_entry *entries;
    void **owned; /* buffers to free, one per entry (NULL where data points into host) */
    char (*names)[112];
    int n;
} save_ctx;

/* The entries of parameter p's parts (recipe r) from src, its values in fp32; staged:
 * src is a copy that goes before the entries are written. */
static hg_status save_parts(save_ctx *c, const hf_recipe *r, const hg_param_info *p, const float *src, int staged) {
    int64_t off = 0;
    for (int i = 0; i < r->n; i++) {
        hg_st_entry *e = &c->entries[c->n];
        const int64_t cols = r->transpose ? p->shape[0] : p->ndim > 1 ? p->shape[1] : 1, numel = r->rows[i] * cols;
        snprintf(c->names[c->n], sizeof c->names[c->n], "%s", r->names[0][i]);
        e->name = c->names[c->n];
        e->dtype = c->bf16 ? HG_ST_BF16 : HG_ST_F32;
        e->ndim = r->transpose ? 2 : p->ndim;
        e->shape[0] = r->rows[i];
        e->shape[1] = cols;
        if (!c->bf16 && !r->transpose && r->offset == 0.0f && !staged) {
            e->data = src + off * cols; /* the parameter's own bytes */
        } else {
            void *buf = malloc((size_t)numel * (c->bf16 ? 2 : 4));
            if (!buf) return hg_fail(HG_ERR_NOMEM, "out of memory");
            c->owned[c->n] = buf;
            e->data = buf;
            for (int64_t x = 0; x < r->rows[i]; x++)
                for (int64_t y = 0; y < cols; y++) {
                    float v = (r->transpose ? src[y * p->shape[1] + off + x] : src[(off + x) * cols + y]) - r->offset;
                    if (c->bf16) ((uint16_t *)buf)[x * cols + y] = to_bf16(v);
                    else ((float *)buf)[x * cols + y] = v;
                }
        }
        c->n++;
        off += r->rows[i];
    }
    return HG_OK;
}

static hg_status save_param(void *ctx, int k, gpt_role role, int l) {
    save_ctx *c = ctx;
    hf_recipe r;
    recipe_of(c->m, c->a, k, role, l, &r); /* hf_arch_cannot has ruled out a missing one */
    hg_param_info p;
    hg_param_at((hg_model *)c->m, k, &p);
    float *src = gpt_param_get(c->m, (float *)c->host, k), *held = gpt_held_bf16(c->m, k) ? src : NULL;
    if (!src) return hg_fail(HG_ERR_NOMEM, "out of memory staging %s", c->m->params.specs[k].name);
    hg_status st = save_parts(c, &r, &p, src, held != NULL);
    gpt_param_put(c->m, (float *)c->host, k, held, 0);
    return st;
}

static int64_t entry_bytes(const hg_st_entry *e) {
    int64_t n = hg_st_dtype_size(e->dtype);
    for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
    return n;
}

/* The entries as transformers shards them: in order, a new shard when the next tensor
 * would take this one past max bytes (a tensor larger than max alone), written as
 * model-0000i-of-0000k.safetensors in dir with model.safetensors.index.json naming the
 * shard of every tensor. */
static hg_status write_shards(const save_ctx *c, const char *dir, int64_t max, const char *const *meta, int n_meta) {
    int *shard = malloc(sizeof(int) * (size_t)c->n), k = 0;
    if (!shard) return hg_fail(HG_ERR_NOMEM, "out of memory");
    int64_t total = 0, params = 0, in_shard = 0;
    for (int i = 0; i < c->n; i++) {
        const int64_t b = entry_bytes(&c->entries[i]);
        if (i && in_shard + b > max) k++, in_shard = 0;
        shard[i] = k, in_shard += b, total += b, params += b / hg_st_dtype_size(c->entries[i].dtype);
    }
    const int n_shards = k + 1;
    size_t cap = strlen(dir) + 64;
    char *path = malloc(cap), name[64];
    cJSON *index = cJSON_CreateObject(), *md = cJSON_AddObjectToObject(index, "metadata"),
          *map = cJSON_AddObjectToObject(index, "weight_map");
    hg_status st = path && map && cJSON_AddNumberToObject(md, "total_parameters", (double)params) &&
                           cJSON_AddNumberToObject(md, "total_size", (double)total)
                       ? HG_OK
                       : hg_fail(HG_ERR_NOMEM, "out of memory");
    for (int i = 0, first = 0; st == HG_OK && i < n_shards; i++) {
        int end = first;
        while (end < c->n && shard[end] == i) end++;
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, n_shards);
        snprintf(path, cap, "%s/%s", dir, name);
        st = hg_st_write(path, c->entries + first, end - first, meta, n_meta);
        for (int t = first; st == HG_OK && t < end; t++)
            if (!cJSON_AddStringToObject(map, c->entries[t].name, name)) st = hg_fail(HG_ERR_NOMEM, "out of memory");
        first = end;
    }
    char *json = st == HG_OK ? cJSON_Print(index) : NULL;
    if (st == HG_OK && !json) st = hg_fail(HG_ERR_NOMEM, "out of memory");
    if (st == HG_OK) {
        snprintf(path, cap, "%s/" HF_INDEX, dir);
        st = hg_write_file_atomic(path, json, strlen(json));
    }
    cJSON_free(json);
    cJSON_Delete(index);
    free(path), free(shard);
    return st;
}

hg_status hf_save_weights(const hg_model *m, hf_arch a, int bf16, const char *path, int64_t max_shard,
                          const char *const *meta, int n_meta) {
    const float *host = gpt_host_begin(m, m->param);
    const int cap = 3 * m->params.count;
    save_ctx c = {m, a, bf16, host, calloc((size_t)cap, sizeof(hg_st_entry)), calloc((size_t)cap, sizeof(void *)),
                  calloc((size_t)cap, 112), 0};
    hg_status st = host && c.entries && c.owned && c.names ? HG_OK : hg_fail(HG_ERR_NOMEM, "out of memory");
    if (st == HG_OK) st = each_param(m, save_param, &c);
    int64_t total = 0;
    for (int i = 0; st == HG_OK && i < c.n; i++) total += entry_bytes(&c.entries[i]);
    if (st == HG_OK && max_shard > 0 && total > max_shard) {
        char *dir = strdup(path), *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash) *slash = 0;
        st = dir ? write_shards(&c, slash ? dir : ".", max_shard, meta, n_meta) : hg_fail(HG_ERR_NOMEM, "out of memory");
        free(dir);
    } else if (st == HG_OK) {
        st = hg_st_write(path, c.entries, c.n, meta, n_meta);
    }
    for (int i = 0; c.owned && i < c.n; i++) free(c.owned[i]);
    free(c.entries), free(c.owned), free(c.names);
    if (host) gpt_host_free(m->param, (float *)host);
    return st;
}

static const char gpt2_tokenizer_config[] =
    "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n  \"add_prefix_space\": false,\n"
    "  \"bos_token\": \"<|endoftext|>\",\n  \"eos_token\": \"<|endoftext|>\",\n  \"unk_token\": \"<|endoftext|>\"\n}\n";

/* Copies dir/name to tmp/name when it exists. */
static hg_status copy_if_there(const char *from, const char *tmp, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", from, name);
    if (access(path, F_OK) != 0) return HG_OK;
    uint8_t *text;
    size_t len;
    HG_TRY(file_read_all(path, &text, &len));
    snprintf(path, cap, "%s/%s", tmp, name);
    hg_status st = hg_write_file_atomic(path, text, len);
    free(text);
    return st;
}

/* config.json for architecture a, and the tokenizer's files when tok is given, into
 * folder dir. */
static hg_status write_description(const hg_model *m, const hg_tokenizer *tok, const char *dir, hf_arch a,
                                   const char *dtype, char *path, size_t cap) {
    const int eot = tok ? hg_tokenizer_eot(tok) : -1;
    char *json = hf_config_json(&m->cfg, a, eot, eot, dtype);
    if (!json) return hg_fail(HG_ERR_NOMEM, "out of memory");
    snprintf(path, cap, "%s/config.json", dir);
    hg_status st = hg_write_file_atomic(path, json, strlen(json));
    free(json);
    HG_TRY(st);
    if (!tok) return HG_OK;
    HG_TRY(hg_tokenizer_save_hf(tok, dir));
    snprintf(path, cap, "%s/vocab.json", dir);
    if (access(path, F_OK) != 0) return HG_OK;
    /* GPT-2's files: transformers needs a tokenizer_config.json */
    if (eot < 0)
        return hg_fail(HG_ERR_UNSUPPORTED, "the tokenizer has no <|endoftext|>, which GPT-2's tokenizer files need");
    char text[sizeof gpt2_tokenizer_config + 16];
    snprintf(text, sizeof text, gpt2_tokenizer_config, m->cfg.max_seq_len);
    snprintf(path, cap, "%s/tokenizer_config.json", dir);
    return hg_write_file_atomic(path, text, strlen(text));
}

/* The files of an export, written into the (new, empty) folder tmp. */
static hg_status write_files(const hg_model *m, const hg_tokenizer *tok, const char *tmp, hf_arch a,
                             const hg_hf_export *how, char *path, size_t cap) {
    HG_TRY(write_description(m, tok, tmp, a, how->bf16 ? "bfloat16" : "float32", path, cap));
    snprintf(path, cap, "%s/model.safetensors", tmp);
    const char *meta[] = {"format", "pt"}; /* transformers checks it */
    HG_TRY(hf_save_weights(m, a, how->bf16, path, how->max_shard_bytes, meta, 1));
    return how->copy_from ? hg_hf_copy_extras(how->copy_from, tmp) : HG_OK;
}

hg_status hf_arch_for(const hg_config *cfg, const char *ask, const char *who, hf_arch *out) {
    for (int s = 0; s < HG_SITES; s++)
        if (cfg->site_op[s][0])
            return hg_fail(HG_ERR_UNSUPPORTED, "%s: no Hugging Face class holds this model: its config places "
                           "op '%s' of its own at %s", who, cfg->site_op[s], hg_site_field((hg_site)s));
    hf_arch a = hf_arch_default(cfg);
    if (ask) HG_TRY(hf_arch_parse(ask, &a));
    const char *field = hf_arch_cannot(a, cfg);
    if (field)
        return hg_fail(HG_ERR_UNSUPPORTED, "%s: %s cannot hold this model: its config differs in %s", who,
                       hf_arch_class(a), field);
    *out = a;
    return HG_OK;
}

hg_status hg_hf_describe(const hg_model *m, const hg_tokenizer *tok, const char *dir) {
    if (!m || !dir) return hg_fail(HG_ERR_INVALID, "hg_hf_describe: NULL argument");
    hf_arch a = HF_GPT2;
    HG_TRY(hf_arch_for(&m->cfg, NULL, dir, &a));
    if (tok && hg_tokenizer_vocab_size(tok) > m->cfg.vocab_size)
        return hg_fail(HG_ERR_INVALID, "the tokenizer has %d ids but the model's vocab_size is %d",
                       hg_tokenizer_vocab_size(tok), m->cfg.vocab_size);
    size_t cap = strlen(dir) + 64;
    char *path = malloc(cap);
    if (!path) return hg_fail(HG_ERR_NOMEM, "out of memory");
    hg_status st = write_description(m, tok, dir, a, "float32", path, cap);
    free(path);
    return st;
}

hg_status hg_hf_copy_extras(const char *from, const char *to) {
    if (!from || !to) return hg_fail(HG_ERR_INVALID, "hg_hf_copy_extras: NULL argument");
    const char *extra[] = {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"};
    size_t cap = strlen(from) + strlen(to) + 64;
    char *path = malloc(cap);
    if (!path) return hg_fail(HG_ERR_NOMEM, "out of memory");
    hg_status st = HG_OK;
    for (int i = 0; i < 3 && st == HG_OK; i++) st = copy_if_there(from, to, extra[i], path, cap);
    free(path);
    return st;
}

const char *hg_hf_architecture(const hg_config *cfg) { return hf_arch_class(hf_arch_default(cfg)); }

hg_status hf_folder_write(const char *dir, hg_status (*fill)(void *ctx, const char *tmp), void *ctx) {
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        DIR *d = S_ISDIR(sb.st_mode) ? opendir(dir) : NULL;
        int entries = 0;
        for (struct dirent *de; d && (de = readdir(d));) entries += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
        if (d) closedir(d);
        if (!d || entries) return hg_fail(HG_ERR_IO, "%s: exists and is not an empty folder", dir);
    }
    size_t cap = strlen(dir) + 8;
    char *tmp = malloc(cap), *up = malloc(cap);
    if (!tmp || !up) {
        free(tmp), free(up);
        return hg_fail(HG_ERR_NOMEM, "out of memory");
    }
    /* everything goes into DIR.tmp, which becomes DIR by one rename: a failure at any
     * point leaves no DIR (or the empty one that was there) */
    snprintf(tmp, cap, "%s.tmp", dir);
    hg_remove_dir(tmp);
    hg_status st = mkdir(tmp, 0777) == 0 ? HG_OK : hg_fail(HG_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (st == HG_OK) st = fill(ctx, tmp);
    if (st == HG_OK && rename(tmp, dir) != 0)
        st = hg_fail(HG_ERR_IO, "%s: cannot rename %s into place: %s", dir, tmp, strerror(errno));
    if (st == HG_OK) {
        snprintf(up, cap, "%s/..", dir);
        st = hg_fsync_dir(up);
    } else {
        hg_remove_dir(tmp);
    }
    free(tmp), free(up);
    return st;
}

typedef struct export_ctx {
    const hg_model *m;
    const hg_tokenizer *tok;
    hf_arch a;
    const hg_hf_export *how;
} export_ctx;

static hg_status export_fill(void *ctx, const char *tmp) {
    export_ctx *e = ctx;
    size_t cap = strlen(tmp) + (e->how->copy_from ? strlen(e->how->copy_from) : 0) + 64;
    char *path = malloc(cap);
    if (!path) return hg_fail(HG_ERR_NOMEM, "out of memory");
    hg_status st = write_files(e->m, e->tok, tmp, e->a, e->how, path, cap);
    free(path);
    return st;
}

hg_status hg_model_save_hf_as(const hg_model *m, const hg_tokenizer *tok, const char *dir, const hg_hf_export *how) {
    if (!m || !dir) return hg_fail(HG_ERR_INVALID, "hg_model_save_hf: NULL argument");
    const hg_hf_export plain = {0};
    if (!how) how = &plain;
    hf_arch a = HF_GPT2;
    HG_TRY(hf_arch_for(&m->cfg, how->architecture, "export", &a));
    if (tok && hg_tokenizer_vocab_size(tok) > m->cfg.vocab_size)
        return hg_fail(HG_ERR_INVALID, "the tokenizer has %d ids but the model's vocab_size is %d",
                       hg_tokenizer_vocab_size(tok), m->cfg.vocab_size);
    export_ctx e = {m, tok, a, how};
    return hf_folder_write(dir, export_fill, &e);
}

hg_status hg_model_save_hf(const hg_model *m, const hg_tokenizer *tok, const char *dir) {
    return hg_model_save_hf_as(m, tok, dir, NULL);
}
