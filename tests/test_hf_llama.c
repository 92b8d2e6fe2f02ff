/* Hugging Face Llama-family folders (tools/gen_hf_llama_fixture.py): a sharded bf16
 * LlamaForCausalLM with Llama 3.1's rope scaling, a tied fp32 Qwen2ForCausalLM with
 * q/k/v biases, an fp16 MistralForCausalLM with a sliding window, a bf16 GemmaForCausalLM,
 * an fp32 Gemma2ForCausalLM, an fp16 Phi3ForCausalLM, a bf16 Olmo2ForCausalLM and an
 * fp32 PhiForCausalLM (Phi-2). Each loads, its
 * logits match transformers' float32 logits, greedy decoding through the KV cache gives
 * transformers' 32 tokens, the tokenizer.json beside it gives the reference prompt's ids,
 * and export writes transformers' own tensors back bit for bit. Then bad folders, each
 * refused with a message naming the file and the key or tensor. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "handgrad.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "model/gpt.h"

/* Relative to the largest |logit|; transformers' and handgrad's fp32 sums differ in
 * order only. */
#define LOGIT_TOL 1e-4

static hg_options inference(void) {
    hg_options o = hg_options_default();
    o.training = 0, o.threads = 2;
    return o;
}

typedef struct ref_data {
    hg_st_file *f;
    int32_t tokens[64], greedy[64];
    int n_tokens, n_greedy;
} ref_data;

static void read_ids(hg_st_file *f, const char *name, int32_t *out, int *n) {
    const hg_st_tensor *t = hg_st_find(f, name);
    double d[64];
    CHECK(t && t->numel <= 64);
    if (!t || t->numel > 64) exit(1);
    *n = (int)t->numel;
    CHECK_OK(hg_st_read_f64(f, t, d, *n));
    for (int i = 0; i < *n; i++) out[i] = (int32_t)d[i];
}

static void load_ref(const char *name, ref_data *r) {
    char path[128];
    snprintf(path, sizeof path, "fixtures/%s_reference.safetensors", name);
    CHECK_OK(hg_st_open(&r->f, path));
    if (!r->f) exit(1);
    read_ids(r->f, "tokens", r->tokens, &r->n_tokens);
    read_ids(r->f, "greedy", r->greedy, &r->n_greedy);
}

static void check_logits(hg_model *m, const ref_data *r, const char *what) {
    const int V = hg_model_config(m)->vocab_size, N = r->n_tokens * V;
    float *got = malloc(sizeof(float) * N);
    double *want = malloc(sizeof(double) * N), mx = 0, worst = 0;
    for (int i = 0; i < N; i++) got[i] = NAN;
    CHECK_OK(hg_st_read_f64(r->f, hg_st_find(r->f, "logits"), want, N));
    CHECK_OK(hg_forward(m, r->tokens, NULL, 1, r->n_tokens, NULL, got));
    for (int i = 0; i < N; i++) mx = fmax(mx, fabs(want[i]));
    for (int i = 0; i < N; i++) {
        double e = fabs(got[i] - want[i]) / mx;
        if (!(e <= worst)) worst = e;
    }
    printf("%s: logits within %.2e of max|logit| %.2f\n", what, worst, mx);
    CHECK(mx > 1.0 && worst <= LOGIT_TOL);
    free(got), free(want);
}

/* Greedy through the KV cache: transformers' continuation, token for token. */
static void check_greedy(hg_model *m, const ref_data *r, const char *what) {
    const int V = hg_model_config(m)->vocab_size;
    float *logits = malloc(sizeof(float) * V);
    hg_sampling greedy = {0};
    uint64_t rng = 0;
    hg_kv_reset(m);
    CHECK_OK(hg_kv_forward(m, r->tokens, r->n_tokens, logits));
    int same = 0;
    for (int i = 0; i < r->n_greedy; i++) {
        int32_t next = -1;
        CHECK_OK(hg_sample(logits, V, &greedy, &rng, &next));
        if (next != r->greedy[i]) break;
        same++;
        if (i + 1 < r->n_greedy) CHECK_OK(hg_kv_forward(m, &next, 1, logits));
    }
    printf("%s: greedy %d of %d tokens as transformers\n", what, same, r->n_greedy);
    CHECK(r->n_greedy == 32 && same == r->n_greedy);
    free(logits);
}

/* The tokenizer beside the weights encodes the reference prompt to the reference ids
 * (with the BOS its tokenizer.json prepends). */
static void check_tokenizer(const char *dir, const ref_data *r, int vocab) {
    hg_tokenizer *tok = NULL;
    CHECK_OK(hg_tokenizer_load(&tok, dir));
    if (!tok) return;
    CHECK(hg_tokenizer_vocab_size(tok) == vocab);
    const char *prompt = hg_st_metadata(r->f, "prompt");
    int32_t ids[128];
    size_t n = 0;
    int32_t bos = hg_tokenizer_bos(tok);
    if (bos >= 0) ids[n++] = bos;
    size_t k = 0;
    CHECK(prompt && strlen(prompt) < 100);
    CHECK_OK(hg_tokenizer_encode(tok, prompt, strlen(prompt), 0, ids + n, 128 - n, &k));
    n += k;
    CHECK(n == (size_t)r->n_tokens && !memcmp(ids, r->tokens, sizeof(int32_t) * n));
    hg_tokenizer_free(tok);
}

/* Every tensor of the exported folder equals the original folder's: the same names,
 * shapes, dtype and bytes (widen: the export is float32 of an f16 original, compared by
 * value). */
static void check_same_tensors(const char *orig_dir, const char *out_dir, int widen) {
    DIR *d = opendir(orig_dir);
    CHECK(d != NULL);
    if (!d) return;
    hf_tensors *out = NULL;
    char path[512];
    CHECK_OK(hf_tensors_open(&out, out_dir));
    int in_orig = 0, same = 0;
    for (struct dirent *de; out && (de = readdir(d));) {
        size_t n = strlen(de->d_name);
        if (n < 12 || strcmp(de->d_name + n - 12, ".safetensors")) continue;
        hg_st_file *f = NULL;
        snprintf(path, sizeof path, "%s/%s", orig_dir, de->d_name);
        CHECK_OK(hg_st_open(&f, path));
        for (int i = 0; f && i < hg_st_count(f); i++) {
            const hg_st_tensor *a = hg_st_at(f, i), *b = hf_tensors_find(out, a->name);
            in_orig++;
            if (!b || a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim)) {
                fprintf(stderr, "export: tensor '%s' is missing or has another shape\n", a->name);
                continue;
            }
            if (!widen) {
                same += a->dtype == b->dtype && !memcmp(a->data, b->data, (size_t)a->numel * hg_st_dtype_size(a->dtype));
                continue;
            }
            float *x = malloc(sizeof(float) * (size_t)a->numel), *y = malloc(sizeof(float) * (size_t)a->numel);
            hg_st_convert_f32(a, 0, a->numel, x);
            hg_st_convert_f32(b, 0, b->numel, y);
            same += b->dtype == HG_ST_F32 && !memcmp(x, y, sizeof(float) * (size_t)a->numel);
            free(x), free(y);
        }
        hg_st_close(f);
    }
    closedir(d);
    printf("export %s: %d of %d tensors as in %s, %d in all\n", out_dir, same, in_orig, orig_dir,
           out ? hf_tensors_count(out) : -1);
    CHECK(in_orig > 10 && same == in_orig && out && hf_tensors_count(out) == in_orig);
    hf_tensors_close(out);
}

static char tmpdir[64];

static void rm_rf(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* An export in shards: model.safetensors.index.json and no model.safetensors; shards
 * named as transformers names them, each at most max bytes of data or one tensor. */
static void check_shards(const char *out_dir, int64_t max) {
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
    CHECK(access(path, R_OK) == 0);
    int n = 0, of = 0, bad = 0;
    for (int i = 1; i <= 99; i++) {
        hg_st_file *f = NULL;
        for (int k = 1; k <= 99 && !f; k++) {
            snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", out_dir, i, k);
            if (access(path, F_OK) == 0 && hg_st_open(&f, path) == HG_OK) of = k;
        }
        if (!f) break;
        int64_t bytes = 0;
        for (int t = 0; t < hg_st_count(f); t++) bytes += hg_st_at(f, t)->numel * hg_st_dtype_size(hg_st_at(f, t)->dtype);
        bad += bytes > max && hg_st_count(f) > 1;
        hg_st_close(f);
        n++;
    }
    printf("export %s: %d shards of at most %lld bytes\n", out_dir, n, (long long)max);
    CHECK(n > 1 && n == of && bad == 0);
}

static void check_folder(const char *name, const char *arch, int bf16, int widen, int64_t max_shard) {
    char dir[96], out[128];
    snprintf(dir, sizeof dir, "fixtures/%s", name);
    ref_data r = {0};
    load_ref(name, &r);
    hg_options o = inference();
    hg_model *m = NULL;
    CHECK_OK(hg_model_load_hf(&m, dir, &o));
    if (!m) exit(1);
    const hg_config *c = hg_model_config(m);
    check_logits(m, &r, name);
    check_greedy(m, &r, name);
    check_tokenizer(dir, &r, c->vocab_size);

    /* export as the same class: transformers' tensors again */
    snprintf(out, sizeof out, "%s/%s", tmpdir, name);
    hg_hf_export how = {.architecture = arch, .bf16 = bf16, .copy_from = dir, .max_shard_bytes = max_shard};
    hg_tokenizer *tok = NULL;
    CHECK_OK(hg_tokenizer_load(&tok, dir));
    CHECK_OK(hg_model_save_hf_as(m, tok, out, &how));
    check_same_tensors(dir, out, widen);
    if (max_shard) check_shards(out, max_shard);
    char path[256];
    const char *files[] = {"config.json", "generation_config.json", "tokenizer.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", out, files[i]);
        CHECK(access(path, R_OK) == 0);
    }
    /* and back: the same config and, for a float32 export, the same parameters */
    hg_model *back = NULL;
    CHECK_OK(hg_model_load_hf(&back, out, &o));
    char why[128];
    CHECK(back && gpt_same_architecture(c, hg_model_config(back), why, sizeof why));
    if (back && !bf16)
        for (int i = 0; i < hg_param_count(m); i++) {
            hg_param_info p, q;
            hg_param_at(m, i, &p), hg_param_at(back, i, &q);
            CHECK(!memcmp(p.data, q.data, sizeof(float) * (size_t)p.numel));
        }
    hg_model_free(back);
    hg_tokenizer_free(tok);
    hg_model_free(m);
    hg_st_close(r.f);
}

static void test_configs(void) {
    hg_options o = inference();
    hg_model *m = NULL;
    CHECK_OK(hg_model_load_hf(&m, "fixtures/hf_llama", &o));
    const hg_config *c = m ? hg_model_config(m) : NULL;
    CHECK(c && c->untied && c->n_kv_head == 2 && c->rope_scaling == HG_ROPE_LLAMA3 && c->rope_factor == 8.0f &&
          c->rope_original_max_len == 32 && (c->omit & HG_OMIT_ALL_BIAS) == HG_OMIT_ALL_BIAS);
    hg_model_free(m);
    CHECK_OK(hg_model_load_hf(&m, "fixtures/hf_qwen2", &o));
    c = m ? hg_model_config(m) : NULL;
    CHECK(c && !c->untied && !(c->omit & HG_OMIT_QKV_BIAS) && (c->omit & HG_OMIT_PROJ_BIAS) && c->rope_theta == 1e6f);
    CHECK(c && !strcmp(hg_hf_architecture(c), "Qwen2ForCausalLM"));
    hg_model_free(m);
    CHECK_OK(hg_model_load_hf(&m, "fixtures/hf_mistral", &o));
    c = m ? hg_model_config(m) : NULL;
    /* the window of every layer, the context the class's own */
    CHECK(c && c->max_seq_len == 128 && c->sliding_window == 80 && hg_layer_window(c, 0) == 80 &&
          hg_layer_window(c, 1) == 80);
    hg_model_free(m);
    CHECK_OK(hg_model_load_hf(&m, "fixtures/hf_gemma2", &o)); /* layer_types: every other layer */
    c = m ? hg_model_config(m) : NULL;
    CHECK(c && c->sliding_window == 96 && c->window_period == 2 && hg_layer_window(c, 0) == 96 &&
          hg_layer_window(c, 1) == 0);
    hg_model_free(m);

    hg_hf_special s;
    CHECK_OK(hg_hf_special_ids("fixtures/hf_llama", &s));
    CHECK(s.n_eos == 2 && s.bos >= 0);
    CHECK_OK(hg_hf_special_ids("fixtures/hf_qwen2", &s));
    CHECK(s.n_eos == 1 && s.bos < 0);
}

/* Gemma, Gemma 2, Phi-2, Phi-3 and OLMo 2 written from a model of handgrad's own and read back: the
 * class the config picks, the same config, and the same parameters bit for bit (a
 * Gemma norm weight v goes out as v - 1, exact for v in [0.5, 2], and comes back as
 * 1 + (v - 1) = v). */
static void check_family_round_trip(const char *arch_fields, const char *want_class) {
    hg_config c;
    CHECK_OK(hg_config_preset("llama-tiny", &c));
    char fields[256], *save = NULL; /* fits the longest list below */
    snprintf(fields, sizeof fields, "%s", arch_fields);
    for (char *kv = strtok_r(fields, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        *eq = 0;
        CHECK_OK(hg_config_set(&c, kv, eq + 1));
    }
    hg_options o = inference();
    o.seed = 5;
    hg_model *m = NULL, *back = NULL;
    CHECK_OK(hg_model_create(&m, &c, &o));
    if (!m) return;
    for (int i = 0; i < hg_param_count(m); i++) { /* norm weights off 1, so the offset shows */
        hg_param_info p;
        hg_param_at(m, i, &p);
        if (!strstr(p.name, "norm") && !strstr(p.name, "ln_")) continue;
        float *w = malloc(sizeof(float) * (size_t)p.numel);
        for (int64_t j = 0; j < p.numel; j++) w[j] = 1.0f + 0.1f * (float)((j * 37 + i * 11) % 19 - 9) / 9.0f;
        CHECK_OK(hg_param_write(m, i, HG_PARAM_DATA, w));
        free(w);
    }
    CHECK(!strcmp(hg_hf_architecture(&c), want_class));
    char out[128];
    static int trips; /* a folder per round trip: a class may come twice */
    snprintf(out, sizeof out, "%s/%s-%d", tmpdir, want_class, trips++);
    CHECK_OK(hg_model_save_hf(m, NULL, out));
    CHECK_OK(hg_model_load_hf(&back, out, &o));
    char why[128] = "";
    CHECK(back && gpt_same_architecture(&c, hg_model_config(back), why, sizeof why));
    int same = 0;
    for (int i = 0; back && i < hg_param_count(m); i++) {
        hg_param_info p, q;
        hg_param_at(m, i, &p), hg_param_at(back, i, &q);
        same += !strcmp(p.name, q.name) && !memcmp(p.data, q.data, sizeof(float) * (size_t)p.numel);
    }
    printf("%s round trip (%s): %d of %d parameters the same%s%s\n", want_class, arch_fields, same,
           hg_param_count(m), *why ? ", " : "", why);
    CHECK(same == hg_param_count(m));
    hg_model_free(back);
    hg_model_free(m);
}

/* ---- bad folders ---- */

/* A fresh copy of a fixture folder in tmpdir/bad. */
static void reset(const char *name) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/bad' && cp -r fixtures/%s '%s/bad'", tmpdir, name, tmpdir);
    CHECK(system(cmd) == 0);
}

static void edit_json(const char *file, const char *key, const char *value) {
    char path[256];
    snprintf(path, sizeof path, "%s/bad/%s", tmpdir, file);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf), *parent = j;
    char k[128];
    snprintf(k, sizeof k, "%s", key);
    char *dot = strchr(k, '.');
    if (dot) { /* one level of nesting: "weight_map.name" (names hold dots too: first dot only) */
        *dot = 0;
        parent = cJSON_GetObjectItemCaseSensitive(j, k);
        memmove(k, dot + 1, strlen(dot + 1) + 1);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(parent, k);
    if (value) cJSON_AddItemToObject(parent, k, cJSON_Parse(value));
    char *s = cJSON_Print(j);
    f = fopen(path, "wb");
    fputs(s, f);
    fclose(f);
    free(s);
    cJSON_Delete(j);
}

static void expect_fail(const char *what, hg_status want, const char *needle) {
    char dir[96];
    snprintf(dir, sizeof dir, "%s/bad", tmpdir);
    hg_options o = inference();
    hg_model *m = NULL;
    hg_status st = hg_model_load_hf(&m, dir, &o);
    printf("  %-24s %s\n", what, hg_last_error());
    if (st != want || !strstr(hg_last_error(), needle) || m) {
        fprintf(stderr, "%s: got %d \"%s\", want %d with \"%s\"\n", what, st, hg_last_error(), want, needle);
        check_failures++;
    }
    hg_model_free(m);
}

/* One edit of a fresh copy of hf_llama, and the refusal it must get. */
static const struct bad_edit {
    const char *what, *file, *key, *value;
    hg_status want;
    const char *needle;
} bad_edits[] = {
    {"experts", "config.json", "num_local_experts", "8", HG_ERR_UNSUPPORTED,
     "config.json: field 'num_local_experts' is not supported"},
    {"yarn", "config.json", "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}", HG_ERR_UNSUPPORTED,
     "field 'rope_scaling.rope_type' = \"yarn\" is not supported"},
    {"gelu", "config.json", "hidden_act", "\"gelu\"", HG_ERR_UNSUPPORTED, "field 'hidden_act' = \"gelu\""},
    {"sizes", "config.json", "intermediate_size", "96", HG_ERR_FORMAT,
     "mlp.gate_proj.weight' has shape [128, 64] but the config implies [96, 64]"},
    {"kv heads", "config.json", "num_key_value_heads", "4", HG_ERR_FORMAT,
     "k_proj.weight' has shape [32, 64] but the config implies [64, 64]"},
    {"tied", "config.json", "tie_word_embeddings", "true", HG_ERR_UNSUPPORTED,
     "lm_head.weight differs from the token embedding"},
    /* the shard index against the shards */
    {"wrong shard", "model.safetensors.index.json", "weight_map.model.layers.0.mlp.up_proj.weight",
     "\"model-00003-of-00003.safetensors\"", HG_ERR_FORMAT, "tensor 'model.layers.0.mlp.up_proj.weight' is in no shard"},
    {"index extra", "model.safetensors.index.json", "weight_map.model.layers.0.mlp.extra.weight",
     "\"model-00001-of-00003.safetensors\"", HG_ERR_FORMAT, "tensor 'model.layers.0.mlp.extra.weight' is in no shard"},
    {"shard path", "model.safetensors.index.json", "weight_map.model.norm.weight", "\"../x.safetensors\"",
     HG_ERR_FORMAT, "weight_map['model.norm.weight'] must be a file name"},
    {"unlisted", "model.safetensors.index.json", "weight_map.model.norm.weight", NULL, HG_ERR_FORMAT,
     "holds tensor 'model.norm.weight', which"},
};

static void test_bad_input(void) {
    char a[256];
    for (size_t i = 0; i < sizeof bad_edits / sizeof bad_edits[0]; i++) {
        const struct bad_edit *e = &bad_edits[i];
        reset("hf_llama");
        edit_json(e->file, e->key, e->value);
        expect_fail(e->what, e->want, e->needle);
    }
    reset("hf_llama");
    snprintf(a, sizeof a, "%s/bad/model-00002-of-00003.safetensors", tmpdir);
    CHECK(remove(a) == 0);
    expect_fail("missing shard", HG_ERR_IO, "names shard model-00002-of-00003.safetensors");
    snprintf(a, sizeof a, "%s/bad/model.safetensors.index.json", tmpdir);
    CHECK(remove(a) == 0);
    expect_fail("no index", HG_ERR_IO, "bad/model.safetensors: cannot open");

    /* the qwen2 file rewritten with one tensor as I32 (the same bytes), then without it */
    reset("hf_qwen2");
    hg_st_file *f = NULL;
    CHECK_OK(hg_st_open(&f, "fixtures/hf_qwen2/model.safetensors"));
    if (!f) return;
    const int n = hg_st_count(f);
    hg_st_entry *e = calloc((size_t)n, sizeof *e);
    for (int i = 0; i < n; i++) {
        const hg_st_tensor *t = hg_st_at(f, i);
        e[i] = (hg_st_entry){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(e[i].shape, t->shape, sizeof t->shape);
        if (!strcmp(t->name, "model.layers.1.self_attn.k_proj.bias")) e[i].dtype = HG_ST_I32;
    }
    snprintf(a, sizeof a, "%s/bad/model.safetensors", tmpdir);
    CHECK_OK(hg_st_write(a, e, n, NULL, 0));
    expect_fail("dtype", HG_ERR_FORMAT, "tensor 'model.layers.1.self_attn.k_proj.bias' has dtype I32");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (e[i].dtype != HG_ST_I32) e[k++] = e[i];
    CHECK_OK(hg_st_write(a, e, k, NULL, 0));
    expect_fail("missing tensor", HG_ERR_FORMAT, "model.safetensors: tensor 'model.layers.1.self_attn.k_proj.bias' is missing");
    free(e);
    hg_st_close(f);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hg_test_hf_llama_XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL);
    check_folder("hf_llama", "LlamaForCausalLM", 1, 0, 0);
    check_folder("hf_qwen2", NULL, 0, 0, 60000); /* float32 in shards */
    check_folder("hf_mistral", "MistralForCausalLM", 0, 1, 0);
    check_folder("hf_gemma", "GemmaForCausalLM", 1, 0, 0);   /* bf16, its norm weights offsets from 1 */
    check_folder("hf_gemma2", "Gemma2ForCausalLM", 0, 0, 0); /* the sandwich block, the logit cap */
    check_folder("hf_phi3", "Phi3ForCausalLM", 0, 1, 0);     /* fp16; fused qkv and gate|up; half a head rotates */
    check_folder("hf_olmo2", "Olmo2ForCausalLM", 1, 0, 0);   /* bf16; the postnorm block, whole-width q/k norms */
    check_folder("hf_phi", "PhiForCausalLM", 0, 0, 0);       /* Phi-2: the parallel block, LayerNorm, every bias */
    test_configs();
    check_family_round_trip("mlp=geglu,embed_scale=8,tied=true", "GemmaForCausalLM");
    check_family_round_trip("mlp=geglu,embed_scale=8,block=sandwich,logit_softcap=3.5,attn_softcap=5", "Gemma2ForCausalLM");
    check_family_round_trip("rotary_dim=8", "Phi3ForCausalLM");
    /* sliding windows: Gemma 2's every other layer, Mistral's every layer, Qwen2's from a
     * layer on */
    check_family_round_trip("mlp=geglu,embed_scale=8,block=sandwich,sliding_window=16,window_period=2",
                            "Gemma2ForCausalLM");
    check_family_round_trip("sliding_window=16", "MistralForCausalLM");
    check_family_round_trip("qkv_bias=true,tied=true,sliding_window=16,window_first_layer=1", "Qwen2ForCausalLM");
    check_family_round_trip("block=postnorm,qk_norm=true,qk_norm_whole=true", "Olmo2ForCausalLM");
    check_family_round_trip("block=parallel,norm=layernorm,mlp=gelu,qkv_bias=true,proj_bias=true,mlp_bias=true,"
                            "norm_bias=true,rotary_dim=8,lm_head_bias=true", "PhiForCausalLM");
    test_bad_input();
    rm_rf(tmpdir);
    CHECK_DONE();
}
