/* Hugging Face import: the tiny GPT2LMHeadModel that tools/gen_hf_fixture.py saved with
 * transformers loads in both layouts (save_pretrained's "transformer." names; the older
 * unprefixed names with mask buffers and an explicit lm_head), its logits match
 * transformers' float64 logits, its tokenizer gives transformers' ids, and greedy
 * decoding through the KV cache gives transformers' continuation. Then every kind of bad
 * folder, made by editing copies of the fixture: each fails with its own status and a
 * message naming the file and the field or tensor. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "handgrad.h"
#include "io/hf.h"
#include "io/safetensors.h"

#define FIX "fixtures/hf_tiny"

/* Logits against float64 transformers, relative to the largest |logit|: the fixture's own
 * float32 transformers run is within 4e-7 of it (tools/gen_hf_fixture.py prints it). */
#define LOGIT_TOL 1e-5

static hg_st_file *ref;
static int32_t ref_tokens[64];
static int n_tokens;

static void load_reference(void) {
    CHECK_OK(hg_st_open(&ref, "fixtures/hf_tiny_reference.safetensors"));
    if (!ref) exit(1);
    const hg_st_tensor *t = hg_st_find(ref, "tokens");
    double d[64];
    CHECK(t && t->numel <= 64);
    n_tokens = (int)t->numel;
    CHECK_OK(hg_st_read_f64(ref, t, d, n_tokens));
    for (int i = 0; i < n_tokens; i++) ref_tokens[i] = (int32_t)d[i];
}

static void check_logits(hg_model *m, const char *what) {
    const int V = hg_model_config(m)->vocab_size, N = n_tokens * V;
    float *got = malloc(sizeof(float) * N);
    double *want = malloc(sizeof(double) * N), mx = 0, worst = 0;
    for (int i = 0; i < N; i++) got[i] = NAN;
    CHECK_OK(hg_st_read_f64(ref, hg_st_find(ref, "logits"), want, N));
    CHECK_OK(hg_forward(m, ref_tokens, NULL, 1, n_tokens, NULL, got));
    for (int i = 0; i < N; i++) mx = fmax(mx, fabs(want[i]));
    for (int i = 0; i < N; i++) {
        double e = fabs(got[i] - want[i]) / mx;
        if (!(e <= worst)) worst = e;
    }
    printf("%s: logits within %.2e of max|logit| %.2f\n", what, worst, mx);
    CHECK(mx > 0.5 && worst <= LOGIT_TOL);
    free(got), free(want);
}

static hg_options inference(void) {
    hg_options o = hg_options_default();
    o.training = 0, o.threads = 2;
    return o;
}

static void test_import(void) {
    hg_options o = inference();
    hg_model *m = NULL, *legacy = NULL;
    CHECK_OK(hg_model_load_hf(&m, FIX, &o));
    CHECK_OK(hg_model_load_hf(&legacy, "fixtures/hf_tiny_legacy", &o));
    if (!m || !legacy) return;
    const hg_config *c = hg_model_config(m);
    CHECK(c->vocab_size == 320 && c->max_seq_len == 64 && c->n_layer == 2 && c->n_head == 4 && c->d_model == 64);
    CHECK(hg_model_options(m)->seq_len == 64);
    check_logits(m, "save_pretrained layout");
    check_logits(legacy, "legacy layout");

    /* the tokenizer files give transformers' ids */
    hg_tokenizer *tok = NULL;
    CHECK_OK(hg_tokenizer_load(&tok, FIX));
    const char *prompt = hg_st_metadata(ref, "prompt");
    int32_t ids[64];
    size_t n = 0;
    CHECK(prompt && strlen(prompt) <= 64);
    CHECK_OK(hg_tokenizer_encode(tok, prompt, strlen(prompt), 0, ids, 64, &n));
    CHECK(n == (size_t)n_tokens && !memcmp(ids, ref_tokens, sizeof(int32_t) * n));
    CHECK(hg_tokenizer_vocab_size(tok) == c->vocab_size);

    /* greedy through the KV cache: transformers' continuation */
    const hg_st_tensor *g = hg_st_find(ref, "greedy");
    double want[64];
    CHECK(g && g->numel < 32);
    CHECK_OK(hg_st_read_f64(ref, g, want, g->numel));
    float logits[320];
    hg_sampling greedy = {0};
    uint64_t rng = 0;
    CHECK_OK(hg_kv_forward(m, ref_tokens, n_tokens, logits));
    int same = 1;
    for (int i = 0; i < g->numel; i++) {
        int32_t next = -1;
        CHECK_OK(hg_sample(logits, 320, &greedy, &rng, &next));
        same &= next == (int32_t)want[i];
        CHECK_OK(hg_kv_forward(m, &next, 1, logits));
    }
    CHECK(same);
    hg_tokenizer_free(tok);
    hg_model_free(m), hg_model_free(legacy);
}

/* ---- bad folders ---- */

static char tmpdir[64];

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) exit(1);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*len + 1);
    CHECK(fread(buf, 1, *len, f) == *len);
    fclose(f);
    buf[*len] = 0;
    return buf;
}

static void spill(const char *name, const void *data, size_t len) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f) fclose(f);
}

/* The fixture's files, copied into tmpdir. */
static void reset_dir(void) {
    size_t len;
    uint8_t *b = slurp(FIX "/config.json", &len);
    spill("config.json", b, len);
    free(b);
    b = slurp(FIX "/model.safetensors", &len);
    spill("model.safetensors", b, len);
    free(b);
}

/* Loading tmpdir fails with `want` and a message containing `needle`. */
static void expect_fail(const char *what, hg_status want, const char *needle) {
    hg_options o = inference();
    hg_model *m = (hg_model *)&o; /* must come back NULL */
    hg_status st = hg_model_load_hf(&m, tmpdir, &o);
    if (st != want || !strstr(hg_last_error(), needle) || m != NULL) {
        fprintf(stderr, "%s: got %s \"%s\", want %s with \"%s\"\n", what, hg_status_name(st), hg_last_error(),
                hg_status_name(want), needle);
        check_failures++;
    } else {
        printf("%-26s %s\n", what, hg_last_error());
    }
    reset_dir();
}

/* Rewrites config.json with field `key` set to the JSON `value` (NULL: removed). */
static void edit_config(const char *key, const char *value) {
    size_t len;
    uint8_t *b = slurp(FIX "/config.json", &len);
    cJSON *j = cJSON_Parse((const char *)b);
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    if (value) cJSON_AddItemToObject(j, key, cJSON_Parse(value));
    char *s = cJSON_Print(j);
    spill("config.json", s, strlen(s));
    free(s), free(b);
    cJSON_Delete(j);
}

/* Rewrites model.safetensors with the header edited by fn; the data bytes stay. */
static void edit_header(void (*fn)(cJSON *h)) {
    size_t len;
    uint8_t *b = slurp(FIX "/model.safetensors", &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i];
    cJSON *h = cJSON_ParseWithLength((const char *)b + 8, hlen);
    fn(h);
    char *s = cJSON_PrintUnformatted(h);
    size_t nh = strlen(s), data = len - 8 - hlen;
    uint8_t *out = malloc(8 + nh + data);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)nh >> (8 * i));
    memcpy(out + 8, s, nh);
    memcpy(out + 8 + nh, b + 8 + hlen, data);
    spill("model.safetensors", out, 8 + nh + data);
    free(out), free(s), free(b);
    cJSON_Delete(h);
}

static void set_field(cJSON *h, const char *tensor, const char *key, const char *json) {
    cJSON *t = cJSON_GetObjectItemCaseSensitive(h, tensor);
    CHECK(t != NULL);
    if (t) cJSON_ReplaceItemInObjectCaseSensitive(t, key, cJSON_Parse(json));
}
static void dtype_i32(cJSON *h) { set_field(h, "transformer.h.1.ln_2.weight", "dtype", "\"I32\""); }
static void transposed(cJSON *h) { set_field(h, "transformer.h.0.mlp.c_fc.weight", "shape", "[256, 64]"); }
static void overlap(cJSON *h) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(h, "transformer.h.0.ln_1.bias");
    cJSON *b = cJSON_GetObjectItemCaseSensitive(h, "transformer.h.0.ln_1.weight");
    cJSON_ReplaceItemInObjectCaseSensitive(b, "data_offsets",
                                           cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(a, "data_offsets"), 1));
}
static void extra(cJSON *h) { /* an empty tensor, so the byte ranges stay disjoint */
    cJSON_AddItemToObject(h, "transformer.h.0.ln_3.bias", cJSON_Parse("{\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [0, 0]}"));
}
static void mixed_prefixes(cJSON *h) {
    cJSON_AddItemToObject(h, "wpe.weight", cJSON_DetachItemFromObjectCaseSensitive(h, "transformer.wpe.weight"));
    cJSON_AddItemToObject(h, "ln_f.bias", cJSON_DetachItemFromObjectCaseSensitive(h, "transformer.ln_f.bias"));
}
static void twice(cJSON *h) { /* wpe both with and without the prefix (the second one empty) */
    cJSON_AddItemToObject(h, "wpe.weight", cJSON_Parse("{\"dtype\": \"F32\", \"shape\": [0, 64], \"data_offsets\": [0, 0]}"));
}
static void empty_head(cJSON *h) {
    cJSON_AddItemToObject(h, "lm_head.weight", cJSON_Parse("{\"dtype\": \"F32\", \"shape\": [0, 64], \"data_offsets\": [0, 0]}"));
}

static void test_bad_input(void) {
    reset_dir();
    hg_options o = inference();
    hg_model *m = NULL;
    CHECK_OK(hg_model_load_hf(&m, tmpdir, &o)); /* the copy itself loads */
    hg_model_free(m);

    edit_config("activation_function", "\"relu\"");
    expect_fail("activation", HG_ERR_UNSUPPORTED, "config.json: field 'activation_function'");
    edit_config("layer_norm_epsilon", "1e-6"); /* another epsilon is taken as given */
    CHECK_OK(hg_model_load_hf(&m, tmpdir, &o));
    CHECK(hg_model_config(m)->norm_eps == 1e-6f);
    hg_model_free(m);
    edit_config("layer_norm_epsilon", "-1");
    expect_fail("epsilon", HG_ERR_FORMAT, "'layer_norm_epsilon'");
    edit_config("tie_word_embeddings", "false"); /* an untied GPT-2 needs its own lm_head */
    expect_fail("untied", HG_ERR_FORMAT, "tensor 'lm_head.weight' is missing");
    edit_config("scale_attn_by_inverse_layer_idx", "true");
    expect_fail("layer scaling", HG_ERR_UNSUPPORTED, "'scale_attn_by_inverse_layer_idx'");
    edit_config("model_type", "\"mixtral\"");
    expect_fail("model type", HG_ERR_UNSUPPORTED, "field 'model_type' = \"mixtral\"");
    edit_config("model_type", "\"llama\"");
    expect_fail("class", HG_ERR_UNSUPPORTED, "field 'architectures' names \"GPT2LMHeadModel\"");
    edit_config("n_expert", "8");
    expect_fail("unknown key", HG_ERR_UNSUPPORTED, "config.json: field 'n_expert' is not supported");
    edit_config("n_embd", NULL);
    expect_fail("no n_embd", HG_ERR_FORMAT, "field 'n_embd' is missing");
    edit_config("n_head", "2.5");
    expect_fail("fractional n_head", HG_ERR_FORMAT, "'n_head' must be a non-negative integer");
    edit_config("n_head", "8");
    expect_fail("head size 8", HG_ERR_UNSUPPORTED, "head_dim = 8");
    spill("config.json", "{\"n_embd\": 64,", 14);
    expect_fail("config not JSON", HG_ERR_FORMAT, "config.json: not valid JSON");
    /* a config that does not match the weights */
    edit_config("n_layer", "3");
    expect_fail("more layers", HG_ERR_FORMAT, "tensor 'h.2.ln_1.weight' is missing");
    edit_config("n_layer", "1");
    expect_fail("fewer layers", HG_ERR_FORMAT, "tensor 'transformer.h.1.");
    edit_config("n_embd", "128");
    expect_fail("wider", HG_ERR_FORMAT, "'transformer.wte.weight' has shape [320, 64] but the config implies [320, 128]");
    edit_config("vocab_size", "321");
    expect_fail("vocab", HG_ERR_FORMAT, "but the config implies [321, 64]");
    edit_config("n_inner", "128");
    expect_fail("n_inner", HG_ERR_FORMAT, "c_fc.weight' has shape [64, 256] but the config implies [64, 128]");

    /* model.safetensors */
    size_t len;
    uint8_t *b = slurp(FIX "/model.safetensors", &len);
    spill("model.safetensors", b, len / 2);
    expect_fail("truncated", HG_ERR_FORMAT, "model.safetensors: tensor");
    spill("model.safetensors", b, 5);
    expect_fail("5 bytes", HG_ERR_FORMAT, "too short");
    uint8_t save = b[5];
    b[5] = 0x7f; /* header length ~ 2^47 */
    spill("model.safetensors", b, len);
    b[5] = save;
    expect_fail("header length", HG_ERR_FORMAT, "exceeds the file");
    b[12] ^= 0x55; /* inside the JSON */
    spill("model.safetensors", b, len);
    b[12] ^= 0x55;
    expect_fail("header garbage", HG_ERR_FORMAT, "model.safetensors: ");
    /* a byte after the last tensor's data: an appended or damaged file */
    uint8_t *longer = malloc(len + 1);
    if (longer) {
        memcpy(longer, b, len);
        longer[len] = 0;
        spill("model.safetensors", longer, len + 1);
        free(longer);
        expect_fail("tail", HG_ERR_FORMAT, "1 bytes at data offset");
    }
    /* a NaN and an infinity among the weights are named, tensor and element */
    hg_st_file *sf = NULL;
    CHECK_OK(hg_st_parse(&sf, "fixture", b, len));
    const hg_st_tensor *w = sf ? hg_st_find(sf, "transformer.h.1.mlp.c_fc.weight") : NULL;
    CHECK(w != NULL && w->dtype == HG_ST_F32);
    size_t at = w ? (size_t)(w->data - b) + 4 * 33 : 0;
    hg_st_close(sf);
    static const float bad_values[] = {NAN, -INFINITY};
    for (int k = 0; at && k < 2; k++) {
        uint8_t keep[4];
        memcpy(keep, b + at, 4);
        memcpy(b + at, &bad_values[k], 4);
        spill("model.safetensors", b, len);
        memcpy(b + at, keep, 4);
        expect_fail("non-finite", HG_ERR_FORMAT, k ? "'transformer.h.1.mlp.c_fc.weight' holds -inf at element 33"
                                                   : "'transformer.h.1.mlp.c_fc.weight' holds nan at element 33");
    }
    free(b);
    edit_header(dtype_i32);
    expect_fail("dtype", HG_ERR_FORMAT, "tensor 'transformer.h.1.ln_2.weight' has dtype I32");
    edit_header(transposed);
    expect_fail("transposed", HG_ERR_FORMAT, "but the config implies [64, 256]");
    edit_header(overlap);
    expect_fail("overlap", HG_ERR_FORMAT, "overlap");
    edit_header(extra);
    expect_fail("extra tensor", HG_ERR_FORMAT, "tensor 'transformer.h.0.ln_3.bias' is not a parameter");
    edit_header(mixed_prefixes);
    CHECK_OK(hg_model_load_hf(&m, tmpdir, &o)); /* mixed prefixes are fine */
    hg_model_free(m);
    edit_header(twice);
    expect_fail("twice", HG_ERR_FORMAT, "tensor 'wpe.weight' appears twice");
    edit_header(empty_head);
    expect_fail("lm_head shape", HG_ERR_FORMAT, "lm_head.weight's shape");
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    remove(path);
    expect_fail("no weights", HG_ERR_IO, "model.safetensors: cannot open");

    /* the legacy file, whose lm_head must equal wte: one bit of it flipped */
    b = slurp("fixtures/hf_tiny_legacy/model.safetensors", &len);
    hg_st_file *f = NULL;
    CHECK_OK(hg_st_parse(&f, "legacy", b, len));
    const hg_st_tensor *head = f ? hg_st_find(f, "lm_head.weight") : NULL;
    CHECK(head != NULL);
    if (head) b[head->data - b + 4 * 1000] ^= 1;
    hg_st_close(f);
    spill("model.safetensors", b, len);
    free(b);
    /* loaded into a model that exists, the refusal leaves every weight as it was: the
     * check compares the file's tensors before anything is copied */
    hg_config lc;
    hg_options lo = inference();
    hg_model *into = NULL, *same = NULL;
    hf_tensors *ts = NULL;
    CHECK_OK(hg_hf_config_load("fixtures/hf_tiny_legacy/config.json", &lc));
    CHECK_OK(hg_model_create(&into, &lc, &lo));
    CHECK_OK(hg_model_create(&same, &lc, &lo)); /* the same seed: the same weights */
    CHECK_OK(hf_tensors_open(&ts, tmpdir));
    if (into && same && ts) {
        CHECK(hf_load_weights(into, HF_GPT2, ts) == HG_ERR_UNSUPPORTED);
        for (int i = 0; i < hg_param_count(into); i++) {
            hg_param_info p, q;
            hg_param_at(into, i, &p);
            hg_param_at(same, i, &q);
            CHECK(!memcmp(p.data, q.data, sizeof(float) * (size_t)p.numel));
        }
    }
    hf_tensors_close(ts);
    hg_model_free(into);
    hg_model_free(same);
    expect_fail("lm_head differs", HG_ERR_UNSUPPORTED, "lm_head.weight differs from the token embedding");

}

/* Export: the folder holds transformers' names with the fixture's exact bytes, loads
 * back to bitwise equal logits, and carries the tokenizer. Refusals leave nothing. */
static void test_export(void) {
    char dir[96], path[160];
    snprintf(dir, sizeof dir, "%s/export", tmpdir);
    hg_options o = inference();
    hg_model *m = NULL, *back = NULL;
    hg_tokenizer *tok = NULL, *tok2 = NULL;
    CHECK_OK(hg_model_load_hf(&m, FIX, &o));
    CHECK_OK(hg_tokenizer_load(&tok, FIX "/vocab.json")); /* GPT-2's files, not tokenizer.json */
    if (!m || !tok) return;
    CHECK_OK(hg_model_save_hf(m, tok, dir));
    CHECK_OK(hg_model_load_hf(&back, dir, &o));
    CHECK_OK(hg_tokenizer_load(&tok2, dir));
    if (!back || !tok2) return;
    CHECK(!memcmp(hg_model_config(m), hg_model_config(back), sizeof(hg_config)));
    CHECK(hg_tokenizer_vocab_size(tok2) == 320 && hg_tokenizer_eot(tok2) == hg_tokenizer_eot(tok));
    float *a = malloc(sizeof(float) * 320 * 12), *b = malloc(sizeof(float) * 320 * 12);
    CHECK_OK(hg_forward(m, ref_tokens, NULL, 1, n_tokens, NULL, a));
    CHECK_OK(hg_forward(back, ref_tokens, NULL, 1, n_tokens, NULL, b));
    CHECK(n_tokens == 12 && !memcmp(a, b, sizeof(float) * 320 * 12));
    free(a), free(b);

    hg_st_file *orig = NULL, *ex = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK_OK(hg_st_open(&ex, path));
    CHECK_OK(hg_st_open(&orig, FIX "/model.safetensors"));
    if (ex && orig) {
        CHECK(hg_st_count(ex) == hg_st_count(orig) && hg_st_count(ex) == 28);
        const char *fmt = hg_st_metadata(ex, "format");
        CHECK(fmt && !strcmp(fmt, "pt"));
        for (int i = 0; i < hg_st_count(orig); i++) {
            const hg_st_tensor *t = hg_st_at(orig, i), *u = hg_st_find(ex, t->name);
            CHECK(u != NULL);
            if (u) CHECK(u->dtype == HG_ST_F32 && u->numel == t->numel && !memcmp(u->data, t->data, 4 * (size_t)t->numel));
        }
    }
    hg_st_close(ex), hg_st_close(orig);
    hg_config cfg;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    CHECK(access(path, R_OK) == 0);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_OK(hg_hf_config_load(path, &cfg));

    /* refused: a folder that is not empty (untouched), a tokenizer of another size (no
     * folder left), a folder that cannot be made */
    CHECK(hg_model_save_hf(m, tok, dir) == HG_ERR_IO && strstr(hg_last_error(), "not an empty folder"));
    CHECK(access(path, R_OK) == 0);
    hg_model *other = NULL;
    hg_config odd;
    CHECK_OK(hg_config_preset("odd", &odd));
    odd.vocab_size = 300; /* fewer ids than the tokenizer (more is fine: padded embeddings) */
    CHECK_OK(hg_model_create(&other, &odd, &o));
    snprintf(path, sizeof path, "%s/other", tmpdir);
    CHECK(hg_model_save_hf(other, tok, path) == HG_ERR_INVALID && strstr(hg_last_error(), "vocab_size is 300"));
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/config.json/x", dir);
    CHECK(hg_model_save_hf(m, tok, path) == HG_ERR_IO);
    snprintf(path, sizeof path, "%s/config.json/x.tmp", dir);
    CHECK(access(path, F_OK) != 0);
    hg_model_free(other);
    const char *files[] = {"config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer_config.json"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        CHECK(remove(path) == 0);
    }
    CHECK(rmdir(dir) == 0); /* nothing else was written */
    hg_tokenizer_free(tok), hg_tokenizer_free(tok2);
    hg_model_free(m), hg_model_free(back);
}

/* F16 and BF16 weights convert exactly (the values were rounded to half by PyTorch). */
static void test_half(void) {
    hg_st_file *f = NULL;
    CHECK_OK(hg_st_open(&f, "fixtures/st_half.safetensors"));
    if (!f) return;
    const char *names[2][2] = {{"f16", "f16_f64"}, {"bf16", "bf16_f64"}};
    for (int k = 0; k < 2; k++) {
        float got[64];
        double want[64];
        for (int i = 0; i < 64; i++) got[i] = NAN;
        CHECK_OK(hg_st_read_f32(f, hg_st_find(f, names[k][0]), got, 64));
        CHECK_OK(hg_st_read_f64(f, hg_st_find(f, names[k][1]), want, 64));
        int bad = 0;
        for (int i = 0; i < 64; i++) bad += !(got[i] == want[i] && !signbit(got[i]) == !signbit(want[i]));
        CHECK(bad == 0);
    }
    hg_st_close(f);
}

/* The bulk conversions of a load against element-by-element hg_st_convert_f32: every
 * float dtype, ragged blocks, destinations on and off cache-line boundaries, the
 * poisoned rest of the destination untouched; the non-finite scan finds the first of
 * two bad elements on 2 threads. */
static void test_convert(void) {
    enum { ROWS = 83, COLS = 77, N = ROWS * COLS };
    static const hg_st_dtype types[] = {HG_ST_F32, HG_ST_F16, HG_ST_BF16, HG_ST_F64};
    uint8_t *data = malloc(8 * N + 8);
    float *dst = malloc(sizeof(float) * (N + 64)), *want = malloc(sizeof(float) * (N + 64));
    uint64_t r = 12345;
    for (size_t i = 0; i < 8 * N + 8; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        data[i] = (uint8_t)(r >> 56);
    }
    for (int k = 0; k < 4; k++) {
        const int size = hg_st_dtype_size(types[k]);
        /* finite values: clear the exponent's top bit of every element (data + 1: unaligned) */
        hg_st_tensor t = {.name = "x", .dtype = types[k], .ndim = 2, .shape = {ROWS, COLS}, .numel = N, .data = data + 1};
        for (int64_t i = 0; i < N; i++) data[1 + i * size + size - 1] &= 0xBF;
        CHECK(hg_st_find_nonfinite(&t, NULL, 2) == -1);
        /* blocks: (r0, nr, c0, nc), ld and the destination's offset in floats */
        const int64_t blocks[][6] = {{0, ROWS, 0, COLS, ROWS, 0}, {3, 64, 5, 64, 80, 16}, {8, 16, 0, 8, 16, 0},
                                     {1, 17, 2, 9, 19, 3},        {0, 8, 0, 8, 8, 0},     {40, 43, 69, 8, 48, 1}};
        for (int b = 0; b < 6; b++) {
            const int64_t r0 = blocks[b][0], nr = blocks[b][1], c0 = blocks[b][2], nc = blocks[b][3], ld = blocks[b][4],
                          off = blocks[b][5];
            for (int64_t i = 0; i < N + 64; i++) dst[i] = want[i] = NAN;
            for (int64_t i = 0; i < nr; i++)
                for (int64_t j = 0; j < nc; j++) hg_st_convert_f32(&t, (r0 + i) * COLS + c0 + j, 1, want + off + j * ld + i);
            hg_st_convert_f32_transposed(&t, COLS, r0, nr, c0, nc, dst + off, ld);
            CHECK(!memcmp(dst, want, sizeof(float) * (N + 64)));
        }
        const int64_t spans[][3] = {{0, N, 0}, {1, 100, 3}, {17, 5000, 16}, {0, 15, 0}, {N - 33, 33, 7}};
        for (int sp = 0; sp < 5; sp++) {
            for (int64_t i = 0; i < N + 64; i++) dst[i] = want[i] = NAN;
            hg_st_convert_f32(&t, spans[sp][0], spans[sp][1], want + spans[sp][2]);
            hg_st_convert_f32_stream(&t, spans[sp][0], spans[sp][1], dst + spans[sp][2]);
            CHECK(!memcmp(dst, want, sizeof(float) * (N + 64)));
        }
        /* two infinities: the scan names the first, whichever thread saw it */
        const uint8_t inf[4][8] = {{0, 0, 0x80, 0x7F}, {0, 0x7C}, {0x80, 0x7F}, {0, 0, 0, 0, 0, 0, 0xF0, 0x7F}};
        memcpy(data + 1 + 6000 * size, inf[k], (size_t)size);
        memcpy(data + 1 + 5001 * size, inf[k], (size_t)size);
        double v = 0;
        CHECK(hg_st_find_nonfinite(&t, &v, 2) == 5001 && isinf(v));
    }
    free(data), free(dst), free(want);
}

int main(void) {
    test_convert();
    test_half();
    load_reference();
    test_import();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hg_test_hf_XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL);
    test_bad_input();
    test_export();
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    remove(path);
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    remove(path);
    CHECK(rmdir(tmpdir) == 0);
    hg_st_close(ref);
    CHECK_DONE();
}
