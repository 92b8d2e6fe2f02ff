/* Checkpoints: the safetensors writer against the reader; weights and optimizer state
 * round-trip bit for bit and a restored model continues with bit-identical losses;
 * bad files (another shape, truncated, header length beyond the file, overlapping
 * offsets, a wrong dtype, a missing tensor) are refused with the model unchanged; config
 * metadata keeps each field's JSON kind (an op named "5e5" stays a string); a
 * write that fails part way (a file size limit, as a full disk would) leaves the old
 * file whole and no temporary behind; run folders: begin, commit, latest, prune;
 * checkpoints checked before they are trusted (finite values, the step of the name,
 * symlinks, pruning killed part way). */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/bf16.h"
#include "handgrad.h"
#include "io/atomic.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "train/checkpoint.h"


enum { B = 2, T = 16 };
static char dir[256];

/* A model of a preset; own=1 gives it a SwiGLU MLP, which no Hugging Face class has with
 * LayerNorm and learned positions, so its weights are kept in handgrad's own layout.
 * state: how it holds AdamW's moments. */
static hg_model *make_state(const char *preset, uint64_t seed, int own, hg_precision state) {
    hg_config c;
    hg_config_preset(preset, &c);
    if (own) c.mlp = HG_MLP_SWIGLU;
    c.dropout = 0.1f; /* so the RNG counter matters */
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T, o.seed = seed, o.threads = 2, o.optim_state = state;
    hg_model *m = NULL;
    CHECK_OK(hg_model_create(&m, &c, &o));
    return m;
}
static hg_model *make_as(const char *preset, uint64_t seed, int own) {
    return make_state(preset, seed, own, HG_PRECISION_FP32);
}
static hg_model *make(const char *preset, uint64_t seed) { return make_as(preset, seed, 0); }

static void batch(int step, int V, int32_t *x, int32_t *y) {
    uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(step + 1);
    for (int i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (int32_t)((s >> 33) % (uint64_t)V);
        y[i] = (int32_t)((s >> 13) % (uint64_t)V);
    }
}

static float train_step(hg_model *m, int step) {
    int32_t x[B * T], y[B * T];
    batch(step, hg_model_config(m)->vocab_size, x, y);
    float loss = NAN;
    hg_adamw a = hg_adamw_default();
    a.lr = 1e-3f;
    CHECK_OK(hg_zero_grad(m));
    CHECK_OK(hg_forward_backward(m, x, y, B, T, 1.0f, &loss));
    CHECK_OK(hg_optimizer_step(m, &a, NULL));
    return loss;
}

/* 1 when every parameter (and, with opt, m and v) of a and b is bitwise equal. */
static int same_params(const hg_model *a, const hg_model *b, int opt) {
    for (int i = 0; i < hg_param_count(a); i++) {
        hg_param_info p, q;
        hg_param_at(a, i, &p);
        hg_param_at(b, i, &q);
        size_t n = sizeof(float) * (size_t)p.numel, ns = n / (p.state_dtype == HG_PRECISION_BF16 ? 2 : 1);
        const void *pm = p.adam_m ? (void *)p.adam_m : p.adam_m_bf16, *pv = p.adam_v ? (void *)p.adam_v : p.adam_v_bf16;
        const void *qm = q.adam_m ? (void *)q.adam_m : q.adam_m_bf16, *qv = q.adam_v ? (void *)q.adam_v : q.adam_v_bf16;
        if (memcmp(p.data, q.data, n) || (opt && (memcmp(pm, qm, ns) || memcmp(pv, qv, ns)))) return 0;
    }
    return 1;
}

static void path(char *out, const char *name) { snprintf(out, 512, "%s/%s", dir, name); }

static void writer_matches_reader(void) {
    char p[512];
    path(p, "w.safetensors");
    float f[6] = {1, -2, 3.5f, 1e-30f, -0.0f, 7};
    int32_t n[3] = {-1, 2, 1 << 30};
    hg_st_entry e[2] = {{"a.b", HG_ST_F32, 2, {2, 3}, f}, {"ids", HG_ST_I32, 1, {3}, n}};
    const char *meta[] = {"k", "quote \" and \\ backslash"};
    CHECK_OK(hg_st_write(p, e, 2, meta, 1));
    hg_st_file *sf = NULL;
    CHECK_OK(hg_st_open(&sf, p));
    if (!sf) return;
    CHECK(hg_st_count(sf) == 2);
    const hg_st_tensor *t = hg_st_find(sf, "a.b");
    CHECK(t && t->dtype == HG_ST_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && !memcmp(t->data, f, 24));
    t = hg_st_find(sf, "ids");
    CHECK(t && t->dtype == HG_ST_I32 && !memcmp(t->data, n, 12));
    CHECK(hg_st_metadata(sf, "k") && !strcmp(hg_st_metadata(sf, "k"), meta[1]));
    hg_st_close(sf);
    struct stat sb;
    stat(p, &sb);
    FILE *fp = fopen(p, "rb");
    uint64_t hlen = 0;
    CHECK(fp && fread(&hlen, 8, 1, fp) == 1);
    if (fp) fclose(fp);
    CHECK(hlen % 8 == 0 && (uint64_t)sb.st_size == 8 + hlen + 24 + 12);
    hg_st_entry dup[2] = {e[0], e[0]};
    CHECK_FAILS(hg_st_write(p, dup, 2, NULL, 0), HG_ERR_INVALID, "a.b");
}

/* Saved, loaded and trained on: bit for bit the run that went on, with the moments in
 * fp32 or in bf16 (rounded stochastically, so the draws must resume too). */
static void round_trip_and_continue(hg_precision state) {
    /* the same seed: dropout masks are drawn from (seed, RNG counter) */
    hg_model *a = make_state("odd", 1, 0, state), *b = make_state("odd", 1, 0, state);
    if (!a || !b) return;
    for (int s = 0; s < 3; s++) train_step(a, s);
    char w[512], o[512];
    path(w, "model.safetensors");
    path(o, "optimizer.safetensors");
    hg_train_state st = {.step = 3, .tokens = 3 * B * T, .epoch = 1, .batch = 7, .B = B, .T = T, .world_size = 1, .seed = 1};
    CHECK_OK(hg_model_save(a, w));
    CHECK_OK(hg_optimizer_save(a, &st, o));
    /* one tensor's moments as saved, widened to fp32 */
    const int idx = 4;
    hg_param_info pi;
    CHECK_OK(hg_param_at(a, idx, &pi));
    CHECK(pi.state_dtype == state && (state == HG_PRECISION_BF16) == (pi.adam_m_bf16 != NULL && pi.adam_m == NULL));
    float *saved = malloc(sizeof(float) * 2 * (size_t)pi.numel), *got_mv = malloc(sizeof(float) * 2 * (size_t)pi.numel);
    for (int k = 0; k < 2; k++) CHECK_OK(hg_param_read(a, idx, (hg_param_part)(HG_PARAM_ADAM_M + k), saved + k * pi.numel));
    hg_config c;
    CHECK_OK(hg_checkpoint_config(w, &c));
    CHECK(c.d_model == 96 && c.n_head == 3 && c.vocab_size == 1000 && c.d_ff == 384 && c.dropout == 0.1f);
    CHECK(!same_params(a, b, 0));
    CHECK_OK(hg_model_load(b, w));
    hg_train_state got;
    memset(&got, 0xAB, sizeof got);
    CHECK_OK(hg_optimizer_load(b, o, &got));
    CHECK(got.step == st.step && got.tokens == st.tokens && got.epoch == 1 && got.batch == 7 && got.B == B &&
          got.T == T && got.world_size == 1 && got.seed == 1);
    CHECK(same_params(a, b, 1));
    CHECK(hg_optimizer_steps(b) == 3 && hg_model_rng_counter(b) == hg_model_rng_counter(a));
    for (int s = 3; s < 6; s++) {
        float la = train_step(a, s), lb = train_step(b, s);
        CHECK(memcmp(&la, &lb, sizeof la) == 0);
    }
    CHECK(same_params(a, b, 1));
    /* a model holding the other type loads the file too: bf16 moments widened exactly,
     * fp32 ones rounded to nearest even */
    const hg_precision other = state == HG_PRECISION_BF16 ? HG_PRECISION_FP32 : HG_PRECISION_BF16;
    hg_model *x = make_state("odd", 2, 0, other);
    hg_train_state xs;
    if (x) {
        CHECK_OK(hg_optimizer_load(x, o, &xs));
        for (int k = 0; k < 2; k++) CHECK_OK(hg_param_read(x, idx, (hg_param_part)(HG_PARAM_ADAM_M + k), got_mv + k * pi.numel));
        int bad = 0;
        for (int64_t j = 0; j < 2 * pi.numel; j++) {
            float want = other == HG_PRECISION_BF16 ? bf16_to_f32(f32_to_bf16(saved[j])) : saved[j];
            bad += memcmp(&want, &got_mv[j], 4) != 0;
        }
        CHECK(bad == 0);
        hg_model_free(x);
    }
    if (state == HG_PRECISION_BF16) { /* a BF16 v below 0 in the file is refused, naming it */
        float *v = malloc(sizeof(float) * (size_t)pi.numel);
        CHECK_OK(hg_param_read(a, idx, HG_PARAM_ADAM_V, v));
        v[6] = -2.0f;
        CHECK_OK(hg_param_write(a, idx, HG_PARAM_ADAM_V, v));
        CHECK_OK(hg_optimizer_save(a, &st, o));
        CHECK_FAILS(hg_optimizer_load(b, o, &got), HG_ERR_FORMAT, "holds -2 at element 6");
        free(v);
    }
    free(saved), free(got_mv);
    hg_model_free(a);
    hg_model_free(b);
}

/* Copies src to dst with `edit` applied to its bytes. */
static void write_bytes(const char *p, const uint8_t *buf, size_t n) {
    FILE *f = fopen(p, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n);
    if (f) fclose(f);
}

static uint8_t *read_bytes(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    if (b && fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* Replaces the first occurrence of `from` in the header with `to` (same length). */
static int patch(uint8_t *buf, size_t n, const char *from, const char *to) {
    size_t k = strlen(from);
    for (size_t i = 8; i + k <= n; i++)
        if (!memcmp(buf + i, from, k)) {
            memcpy(buf + i, to, k);
            return 1;
        }
    return 0;
}

/* Bad files in handgrad's own layout. */
static void bad_files(void) {
    hg_model *m = make_as("odd", 3, 1), *tiny = make_as("tiny", 3, 1), *ref = make_as("odd", 3, 1);
    if (!m || !tiny || !ref) return;
    char w[512], t[512], bad[512];
    path(w, "model.safetensors");
    path(t, "tiny.safetensors");
    path(bad, "bad.safetensors");
    CHECK_OK(hg_model_save(m, w));
    CHECK_OK(hg_model_save(tiny, t));
    CHECK_FAILS(hg_model_load(m, t), HG_ERR_INVALID, "vocab_size");
    size_t n;
    uint8_t *orig = read_bytes(w, &n), *buf = malloc(n);
    if (!orig || !buf) return;
    uint64_t hlen;
    memcpy(&hlen, orig, 8);
    /* truncated: the data of the last tensor runs past the end */
    write_bytes(bad, orig, n - 100);
    CHECK_FAILS(hg_model_load(m, bad), HG_ERR_FORMAT, "bad.safetensors");
    /* header length beyond the file */
    memcpy(buf, orig, n);
    uint64_t huge = n;
    memcpy(buf, &huge, 8);
    write_bytes(bad, buf, n);
    CHECK_FAILS(hg_model_load(m, bad), HG_ERR_FORMAT, "header length");
    /* a wrong dtype: F32 -> I32 keeps every size */
    memcpy(buf, orig, n);
    CHECK(patch(buf, 8 + hlen, "\"F32\"", "\"I32\""));
    write_bytes(bad, buf, n);
    CHECK_FAILS(hg_model_load(m, bad), HG_ERR_FORMAT, "not F32");
    /* overlapping offsets: the second tensor's range starts inside the first's */
    memcpy(buf, orig, n);
    char from[64], to[64];
    hg_param_info p0;
    hg_param_at(m, 0, &p0);
    long long e0 = 4 * p0.numel;
    snprintf(from, sizeof from, "[%lld,", e0);
    snprintf(to, sizeof to, "[%0*lld,", (int)strlen(from) - 2, e0 - 4);
    CHECK(patch(buf, 8 + hlen, from, to));
    write_bytes(bad, buf, n);
    CHECK_FAILS(hg_model_load(m, bad), HG_ERR_FORMAT, "bad.safetensors");
    /* another format tag, another version, a missing tensor */
    memcpy(buf, orig, n);
    CHECK(patch(buf, 8 + hlen, "handgrad-weights", "handgrad-weightz"));
    write_bytes(bad, buf, n);
    CHECK_FAILS(hg_model_load(m, bad), HG_ERR_FORMAT, "format");
    memcpy(buf, orig, n);
    CHECK(patch(buf, 8 + hlen, "\"version\":\"2\"", "\"version\":\"9\""));
    write_bytes(bad, buf, n);
    CHECK_FAILS(hg_model_load(m, bad), HG_ERR_FORMAT, "version");
    memcpy(buf, orig, n);
    CHECK(patch(buf, 8 + hlen, "\"ln_f.bias\"", "\"ln_f.bia_\""));
    write_bytes(bad, buf, n);
    CHECK_FAILS(hg_model_load(m, bad), HG_ERR_FORMAT, "tensor 'ln_f.bias' is missing");
    /* a name twice: JSON allows it, safetensors does not */
    memcpy(buf, orig, n);
    CHECK(patch(buf, 8 + hlen, "\"h.1.ln_1.bias\"", "\"h.0.ln_1.bias\""));
    write_bytes(bad, buf, n);
    CHECK_FAILS(hg_model_load(m, bad), HG_ERR_FORMAT, "tensor 'h.0.ln_1.bias' appears twice");
    CHECK(same_params(m, ref, 0)); /* every refusal left the model as it was */
    /* weights are not optimizer state */
    hg_train_state st;
    CHECK_FAILS(hg_optimizer_load(m, w, &st), HG_ERR_FORMAT, "format");
    free(orig);
    free(buf);
    hg_model_free(m);
    hg_model_free(tiny);
    hg_model_free(ref);
}

/* The metadata value of key in safetensors file path ("" when absent). */
static void meta_of(const char *path, const char *key, char *out, size_t cap) {
    hg_st_file *f;
    out[0] = 0;
    if (hg_st_open(&f, path) != HG_OK) return;
    const char *v = hg_st_metadata(f, key);
    snprintf(out, cap, "%s", v ? v : "");
    hg_st_close(f);
}

/* Weights a Hugging Face class holds are saved in its layout, with config.json beside
 * them from hg_hf_describe: each class round-trips bit for bit and config.json reads back
 * as the model's config; a model no class holds keeps handgrad's layout and describe
 * refuses naming the field; a config.json that disagrees with the weights, and bad
 * files in this layout, are refused with the model unchanged. */
static void hf_layout(void) {
    struct { const char *preset; int own; const char *cls; } cases[] = {
        {"odd", 0, "GPT2LMHeadModel"},        {"llama-tiny", 0, "LlamaForCausalLM"},
        {"qwen2-tiny", 0, "Qwen2ForCausalLM"}, {"qwen3-tiny", 0, "Qwen3ForCausalLM"},
        {"odd", 1, ""}};
    char folder[300], w[400], js[400], v[128];
    for (int i = 0; i < 5; i++) {
        snprintf(folder, sizeof folder, "%s/hf%d", dir, i);
        mkdir(folder, 0777);
        snprintf(w, sizeof w, "%s/model.safetensors", folder);
        snprintf(js, sizeof js, "%s/config.json", folder);
        hg_model *a = make_as(cases[i].preset, 5, cases[i].own), *b = make_as(cases[i].preset, 6, cases[i].own);
        if (!a || !b) return;
        CHECK(!same_params(a, b, 0));
        CHECK_OK(hg_model_save(a, w));
        meta_of(w, "format", v, sizeof v);
        CHECK(!strcmp(v, cases[i].own ? "handgrad-weights" : "pt"));
        meta_of(w, "architecture", v, sizeof v);
        CHECK(!strcmp(v, cases[i].cls));
        if (cases[i].own) {
            CHECK_FAILS(hg_hf_describe(a, NULL, folder), HG_ERR_UNSUPPORTED, "cannot hold this model: its config differs in");
            CHECK(access(js, F_OK) != 0);
        } else {
            CHECK_OK(hg_hf_describe(a, NULL, folder));
            hg_config c;
            char why[256] = "";
            CHECK_OK(hg_hf_config_load(js, &c));
            CHECK(gpt_same_architecture(&c, hg_model_config(a), why, sizeof why));
            if (why[0]) fprintf(stderr, "%s: %s\n", cases[i].preset, why);
        }
        CHECK_OK(hg_model_load(b, w));
        CHECK(same_params(a, b, 0));
        hg_model_free(a);
        hg_model_free(b);
    }
    /* config.json of another model beside the weights */
    hg_model *m = make("odd", 7), *ref = make("odd", 5), *two = NULL;
    hg_config c2 = *hg_model_config(m);
    c2.n_layer = 3;
    hg_options o = *hg_model_options(m);
    CHECK_OK(hg_model_create(&two, &c2, &o));
    if (!m || !ref || !two) return;
    snprintf(folder, sizeof folder, "%s/hf_other", dir);
    mkdir(folder, 0777);
    snprintf(w, sizeof w, "%s/model.safetensors", folder);
    CHECK_OK(hg_model_save(m, w));
    CHECK_OK(hg_hf_describe(two, NULL, folder));
    CHECK_FAILS(hg_model_load(ref, w), HG_ERR_FORMAT, "n_layer");
    /* bad files in this layout */
    size_t n;
    uint8_t *orig = read_bytes(w, &n), *buf = malloc(n);
    uint64_t hlen;
    if (!orig || !buf) return;
    memcpy(&hlen, orig, 8);
    struct { const char *from, *to, *needle; } bad[] = {
        {"\"pt\"", "\"px\"", "format"},
        {"\"version\":\"3\"", "\"version\":\"9\"", "version"},
        {"GPT2LMHeadModel", "GPT2LMHeadModez", "architecture"},
        {"\"transformer.ln_f.bias\"", "\"transformer.ln_f.bia_\"", "tensor 'ln_f.bias' is missing"},
        {"\"transformer.h.1.ln_1.bias\"", "\"transformer.h.0.ln_1.bias\"", "h.0.ln_1.bias"},
        {"\"F32\"", "\"I32\"", "dtype I32"}};
    char bad_path[400];
    snprintf(bad_path, sizeof bad_path, "%s/hf_bad.safetensors", dir);
    for (int i = 0; i < 6; i++) {
        memcpy(buf, orig, n);
        CHECK(patch(buf, 8 + hlen, bad[i].from, bad[i].to));
        write_bytes(bad_path, buf, n);
        CHECK_FAILS(hg_model_load(ref, bad_path), HG_ERR_FORMAT, bad[i].needle);
    }
    hg_model *fresh = make("odd", 5);
    if (fresh) CHECK(same_params(ref, fresh, 0)); /* every refusal left ref as it was */
    hg_model_free(fresh);
    CHECK_OK(hg_hf_describe(m, NULL, folder)); /* the right config.json */
    CHECK_OK(hg_model_load(ref, w));
    CHECK(same_params(ref, m, 0));
    free(orig);
    free(buf);
    hg_model_free(m);
    hg_model_free(ref);
    hg_model_free(two);
}

/* The config in checkpoint metadata keeps each field's JSON kind: an op named like a
 * number stays a string (written as a number, 50000000000000008 printed back as 5e+16),
 * and a value of the wrong kind is refused naming its field. */
static void config_json_kinds(void) {
    hg_config c, d;
    CHECK_OK(hg_config_preset("odd", &c));
    CHECK_OK(hg_config_set(&c, "op_mlp_act", "50000000000000008"));
    CHECK_OK(hg_config_set(&c, "op_final_norm", "5e5"));
    char *json = ckpt_config_json(&c), why[256] = "";
    CHECK(json && strstr(json, "\"op_mlp_act\":\"50000000000000008\"") && strstr(json, "\"op_final_norm\":\"5e5\""));
    CHECK_OK(ckpt_config_parse("meta", json, &d));
    CHECK(gpt_same_architecture(&c, &d, why, sizeof why));
    if (why[0]) fprintf(stderr, "round trip: %s\n", why);
    free(json);
    CHECK_FAILS(ckpt_config_parse("meta", "{\"op_mlp_act\":50000000000000011}", &d), HG_ERR_FORMAT, "'op_mlp_act' must be a JSON string");
    CHECK_FAILS(ckpt_config_parse("meta", "{\"tied\":\"true\"}", &d), HG_ERR_FORMAT, "'tied' must be a JSON boolean");
    CHECK_FAILS(ckpt_config_parse("meta", "{\"n_layer\":\"2\"}", &d), HG_ERR_FORMAT, "'n_layer' must be a JSON number");
    CHECK_FAILS(ckpt_config_parse("meta", "{\"n_layers\":2}", &d), HG_ERR_FORMAT, "no field 'n_layers'");
}

/* A write that fails part way (RLIMIT_FSIZE: EFBIG, as ENOSPC would be) leaves the
 * previous file whole and no temporary file behind. */
static void failed_write_keeps_old(void) {
    hg_model *m = make("odd", 4);
    if (!m) return;
    char w[512], tmp[600];
    path(w, "keep.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", w);
    CHECK_OK(hg_model_save(m, w));
    size_t n0;
    uint8_t *before = read_bytes(w, &n0);
    train_step(m, 0); /* different weights */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 100000;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK_FAILS(hg_model_save(m, w), HG_ERR_IO, "write failed after");
    setrlimit(RLIMIT_FSIZE, &old);
    size_t n1;
    uint8_t *after = read_bytes(w, &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0));
    CHECK(access(tmp, F_OK) != 0);
    free(before);
    free(after);
    hg_model_free(m);
}

static void run_folder(void) {
    char run[512], tmp[600], latest[600], wpath[700];
    path(run, "run");
    CHECK(mkdir(run, 0755) == 0);
    int64_t step = -1;
    CHECK_FAILS(hg_checkpoint_latest(run, latest, sizeof latest, &step), HG_ERR_IO, "no checkpoint");
    hg_model *m = make("tiny", 5);
    if (!m) return;
    for (int s = 1; s <= 4; s++) {
        CHECK_OK(hg_checkpoint_begin(run, 10 * s, tmp, sizeof tmp));
        snprintf(wpath, sizeof wpath, "%s/model.safetensors", tmp);
        CHECK_OK(hg_model_save(m, wpath));
        if (s == 4) { /* a crash before the commit: only the temporary folder exists */
            CHECK_OK(hg_checkpoint_latest(run, latest, sizeof latest, &step));
            CHECK(step == 30);
            break;
        }
        CHECK_OK(hg_checkpoint_commit(run, 10 * s, tmp));
    }
    CHECK_OK(hg_checkpoint_resolve(run, wpath, sizeof wpath));
    CHECK(strstr(wpath, "ckpt_00000030/model.safetensors") != NULL);
    /* the same step again replaces it */
    CHECK_OK(hg_checkpoint_begin(run, 30, tmp, sizeof tmp));
    snprintf(wpath, sizeof wpath, "%s/model.safetensors", tmp);
    CHECK_OK(hg_model_save(m, wpath));
    CHECK_OK(hg_checkpoint_commit(run, 30, tmp));
    CHECK_OK(hg_checkpoint_prune(run, 2));
    snprintf(latest, sizeof latest, "%s/ckpt_00000010", run);
    CHECK(access(latest, F_OK) != 0);
    snprintf(latest, sizeof latest, "%s/ckpt_00000020", run);
    CHECK(access(latest, F_OK) == 0);
    snprintf(latest, sizeof latest, "%s/ckpt_00000040.tmp", run);
    CHECK(access(latest, F_OK) != 0);
    CHECK_OK(hg_checkpoint_latest(run, latest, sizeof latest, &step));
    CHECK(step == 30);
    hg_model_free(m);
}

/* Writes ckpt_<name_step> in run holding m's weights and optimizer state at state_step. */
static void write_ckpt(hg_model *m, const char *run, int64_t name_step, int64_t state_step) {
    char tmp[600], p[700];
    hg_train_state st = {.step = state_step, .B = B, .T = T, .world_size = 1, .seed = 1};
    CHECK_OK(hg_checkpoint_begin(run, name_step, tmp, sizeof tmp));
    snprintf(p, sizeof p, "%s/model.safetensors", tmp);
    CHECK_OK(hg_model_save(m, p));
    snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
    CHECK_OK(hg_optimizer_save(m, &st, p));
    CHECK_OK(hg_checkpoint_commit(run, name_step, tmp));
}

static int exists(const char *run, const char *name) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", run, name);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

/* Checkpoints are checked before they are trusted: values finite (v >= 0), the folder's
 * step that of its state, symlinks neither chosen nor followed by pruning, a pruned
 * folder renamed away before it is deleted. */
static void trusted_checkpoints(void) {
    char run[512], latest[600], p[700], outside[512];
    path(run, "trusted");
    path(outside, "outside");
    CHECK(mkdir(run, 0755) == 0 && mkdir(outside, 0755) == 0);
    hg_model *m = make("tiny", 7), *ref = make("tiny", 7), *twin = make("tiny", 7);
    if (!m || !ref || !twin) return;
    train_step(m, 0);
    train_step(ref, 0);
    train_step(twin, 0);
    write_ckpt(m, run, 5, 5);
    int64_t step = -1;
    CHECK_OK(hg_checkpoint_latest(run, latest, sizeof latest, &step));
    CHECK(step == 5);
    /* a folder whose name says 50 and whose state says 5 */
    write_ckpt(m, run, 50, 5);
    CHECK_FAILS(hg_checkpoint_latest(run, latest, sizeof latest, &step), HG_ERR_FORMAT, "at step 5 but the folder's name says step 50");
    snprintf(p, sizeof p, "%s/ckpt_00000050/model.safetensors", run);
    CHECK(unlink(p) == 0);
    CHECK_FAILS(hg_checkpoint_latest(run, latest, sizeof latest, &step), HG_ERR_FORMAT, "without model.safetensors");
    CHECK_FAILS(hg_checkpoint_resolve(latest, p, sizeof p), HG_ERR_IO, "without model.safetensors");
    snprintf(p, sizeof p, "%s/ckpt_00000050", run);
    hg_remove_dir(p);
    /* a symlink named as the newest checkpoint, to a folder outside */
    snprintf(p, sizeof p, "%s/keep.txt", outside);
    write_bytes(p, (const uint8_t *)"x", 1);
    snprintf(p, sizeof p, "%s/ckpt_00000090", run);
    CHECK(symlink(outside, p) == 0);
    CHECK_OK(hg_checkpoint_latest(run, latest, sizeof latest, &step));
    CHECK(step == 5);
    /* a folder left half-pruned by a kill */
    snprintf(p, sizeof p, "%s/ckpt_00000003.del", run);
    CHECK(mkdir(p, 0755) == 0);
    write_ckpt(m, run, 6, 6);
    CHECK_OK(hg_checkpoint_prune(run, 1));
    CHECK(!exists(run, "ckpt_00000005") && !exists(run, "ckpt_00000005.del") && !exists(run, "ckpt_00000003.del"));
    CHECK(exists(run, "ckpt_00000006") && exists(run, "ckpt_00000090") && exists(outside, "keep.txt"));
    CHECK_OK(hg_checkpoint_latest(run, latest, sizeof latest, &step));
    CHECK(step == 6);
    /* non-finite values, and a negative second moment, refused naming the tensor; the
     * model keeps its values */
    hg_param_info pi;
    hg_param_at(m, 2, &pi);
    char w[700], o[700];
    snprintf(w, sizeof w, "%s/model.safetensors", latest);
    snprintf(o, sizeof o, "%s/optimizer.safetensors", latest);
    hg_train_state st;
    float keep = pi.data[3];
    pi.data[3] = NAN;
    CHECK_OK(hg_model_save(m, w));
    pi.data[3] = keep;
    CHECK_FAILS(hg_model_load(ref, w), HG_ERR_FORMAT, "holds nan at element 3");
    if (!strstr(hg_last_error(), pi.name)) CHECK(!"the message names the tensor");
    keep = pi.adam_v[4];
    pi.adam_v[4] = -1.0f;
    CHECK_OK(hg_optimizer_save(m, &(hg_train_state){.step = 6, .B = B, .T = T, .world_size = 1}, o));
    CHECK_FAILS(hg_optimizer_load(ref, o, &st), HG_ERR_FORMAT, "holds -1 at element 4");
    pi.adam_v[4] = keep;
    pi.adam_m[0] = INFINITY;
    CHECK_OK(hg_optimizer_save(m, &(hg_train_state){.step = 6, .B = B, .T = T, .world_size = 1}, o));
    CHECK_FAILS(hg_optimizer_load(ref, o, &st), HG_ERR_FORMAT, "holds inf at element 0");
    CHECK(same_params(ref, twin, 1));
    hg_model_free(m);
    hg_model_free(ref);
    hg_model_free(twin);
}

/* Files in a folder (-1 when it cannot be opened). */
static int count_files(const char *d) {
    DIR *dp = opendir(d);
    if (!dp) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dp));) n += e->d_name[0] != '.';
    closedir(dp);
    return n;
}

/* Pruning killed at staggered moments: the old checkpoint is whole under its own name or
 * gone from it, never half-deleted there, and the next prune finishes the job. */
static void kill_during_prune(void) {
    enum { FILES = 1000, TRIALS = 12 };
    char run[512], old[600], p[700];
    path(run, "prune_kill");
    CHECK(mkdir(run, 0755) == 0);
    snprintf(old, sizeof old, "%s/ckpt_00000001", run);
    hg_model *m = make("tiny", 9);
    if (!m) return;
    write_ckpt(m, run, 2, 2);
    int mid = 0; /* trials killed with the old folder part deleted */
    double whole = 0; /* seconds of a prune not killed (trial -1); kills spread over it */
    for (int trial = -1; trial < TRIALS; trial++) {
        CHECK(mkdir(old, 0755) == 0);
        for (int i = 0; i < FILES; i++) {
            snprintf(p, sizeof p, "%s/f%04d", old, i);
            write_bytes(p, (const uint8_t *)"x", 1);
        }
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        if (pid == 0) _exit(hg_checkpoint_prune(run, 1) == HG_OK ? 0 : 1);
        if (trial >= 0) {
            nanosleep(&(struct timespec){0, (long)(1e9 * whole * (trial + 0.5) / TRIALS)}, NULL);
            kill(pid, SIGKILL);
        }
        waitpid(pid, NULL, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (trial < 0) whole = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (whole > 0.5) whole = 0.5;
        int left = count_files(old);
        CHECK(left == -1 || left == FILES);
        snprintf(p, sizeof p, "%s.del", old);
        int del = count_files(p);
        mid += del > 0 && del < FILES;
        int64_t step = -1;
        char latest[600];
        CHECK_OK(hg_checkpoint_latest(run, latest, sizeof latest, &step));
        CHECK(step == 2);
        CHECK_OK(hg_checkpoint_prune(run, 1));
        CHECK(count_files(old) == -1 && count_files(p) == -1);
    }
    CHECK(mid > 0); /* some kill landed in the middle of a deletion */
    fprintf(stderr, "kill during prune: %d of %d kills landed mid-deletion\n", mid, TRIALS);
    hg_model_free(m);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hg_test_checkpoint.XXXXXX");
    if (!mkdtemp(dir)) return 1;
    writer_matches_reader();
    round_trip_and_continue(HG_PRECISION_FP32);
    round_trip_and_continue(HG_PRECISION_BF16);
    bad_files();
    hf_layout();
    config_json_kinds();
    failed_write_keeps_old();
    run_folder();
    trusted_checkpoints();
    kill_during_prune();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (!check_failures && system(cmd) != 0) return 1;
    CHECK_DONE();
}
