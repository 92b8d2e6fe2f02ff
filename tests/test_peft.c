/* PEFT folders against PEFT + transformers in float64 (tests/fixtures/peft_<name>/ and
 * peft_<name>_reference.safetensors, made by tools/gen_peft_fixture.py) for the Llama,
 * Qwen2, Gemma and Phi-3 fixtures, adapters on every attention and MLP linear (Phi-3's
 * fused qkv_proj and gate_up_proj whole):
 *   - adapter_config.json resolved against the base folder's class, the adapter loaded;
 *     the logits of the adapted model within 2e-5 (of the largest) of PEFT's float64 ones;
 *   - ten adapter-only AdamW steps (lr 1e-3, weight decay, clipping): every step's loss
 *     within 1e-4 of PEFT's, the final adapters within 1e-4 (relative);
 *   - hg_peft_save writes a folder that loads back bit for bit, and whose
 *     adapter_config.json lists the same modules;
 *   - hg_lora_merge then the Hugging Face export: every adapted weight within 1e-6 (of
 *     the largest) of PEFT's merge_and_unload();
 *   - bad folders refused, naming the key, module or tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "handgrad.h"
#include "io/atomic.h"
#include "io/safetensors.h"

#define FIXTURES "fixtures" /* ctest runs the tests in tests/ */

static char tmp_root[] = "/tmp/hg_peft_XXXXXX";

/* max |got - want| / max |want|, want read as F32 or F64 from t. */
static double rel(const float *got, const hg_st_tensor *t) {
    double e = 0, w = 1e-30;
    float *want = malloc(sizeof(float) * (size_t)t->numel);
    hg_st_convert_f32(t, 0, t->numel, want);
    for (int64_t i = 0; i < t->numel; i++) {
        if (!(got[i] == got[i])) e = INFINITY;
        e = fmax(e, fabs((double)got[i] - want[i])), w = fmax(w, fabs((double)want[i]));
    }
    free(want);
    return e / w;
}

/* A model of base folder hf_<name> with the adapter of peft_<name>, for B x T batches. */
static hg_model *adapted(const char *name, int B, int T, const char *adapter_dir) {
    char base[512], cfgp[600];
    snprintf(base, sizeof base, FIXTURES "/hf_%s", name);
    snprintf(cfgp, sizeof cfgp, "%s/config.json", base);
    hg_peft_config pc;
    hg_config cfg;
    const char *cls = NULL;
    CHECK_OK(hg_peft_config_load(adapter_dir, &pc));
    CHECK_OK(hg_hf_config_load(cfgp, &cfg));
    CHECK_OK(hg_hf_config_class(cfgp, &cls));
    CHECK(!strcmp(pc.base_model, name) || strstr(pc.base_model, name));
    CHECK_OK(hg_hf_lora_targets(&cfg, cls, pc.targets, &pc.lora));
    hg_options o = hg_options_default();
    o.batch = B, o.seq_len = T, o.threads = 2, o.lora = pc.lora;
    hg_model *m = NULL;
    CHECK_OK(hg_model_load_hf(&m, base, &o));
    if (m) CHECK_OK(hg_peft_load(m, adapter_dir));
    return m;
}

static void against_peft(const char *name) {
    char ref_path[512], adapter[512];
    snprintf(ref_path, sizeof ref_path, FIXTURES "/peft_%s_reference.safetensors", name);
    snprintf(adapter, sizeof adapter, FIXTURES "/peft_%s", name);
    hg_st_file *ref = NULL;
    CHECK_OK(hg_st_open(&ref, ref_path));
    if (!ref) return;
    const hg_st_tensor *tokens = hg_st_find(ref, "tokens"), *targets = hg_st_find(ref, "targets"),
                       *loss = hg_st_find(ref, "loss"), *logits = hg_st_find(ref, "logits");
    CHECK(tokens && targets && loss && logits);
    if (!tokens || !targets || !loss || !logits) return;
    const int STEPS = (int)tokens->shape[0], B = (int)tokens->shape[1], T = (int)tokens->shape[2];
    hg_model *m = adapted(name, B, T, adapter);
    if (!m) return;
    const int V = hg_model_config(m)->vocab_size;
    const int32_t *tok = (const int32_t *)tokens->data, *tgt = (const int32_t *)targets->data;
    /* the adapted model as loaded */
    float *lg = malloc(sizeof(float) * (size_t)B * T * V), l0;
    CHECK_OK(hg_forward(m, tok, tgt, B, T, &l0, lg));
    double e_logits = rel(lg, logits);
    free(lg);
    /* ten steps */
    hg_adamw a = hg_adamw_default();
    a.lr = 1e-3f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weight_decay = 0.1f, a.grad_clip = 1.0f;
    float want[64];
    double e_loss = 0;
    CHECK(loss->numel == STEPS && STEPS <= 64);
    hg_st_convert_f32(loss, 0, loss->numel, want);
    for (int s = 0; s < STEPS; s++) {
        float l;
        CHECK_OK(hg_zero_grad(m));
        CHECK_OK(hg_forward_backward(m, tok + (size_t)s * B * T, tgt + (size_t)s * B * T, B, T, 1.0f, &l));
        CHECK_OK(hg_optimizer_step(m, &a, NULL));
        e_loss = fmax(e_loss, fabs(l - want[s]));
        if (getenv("PEFT_VERBOSE")) printf("  step %d: %.7f against %.7f\n", s, l, want[s]);
    }
    /* the final adapters, by PEFT's names (what hg_peft_save writes) */
    snprintf(adapter, sizeof adapter, "%s/%s_trained", tmp_root, name);
    CHECK_OK(hg_peft_save(m, adapter, name));
    char saved_path[600];
    snprintf(saved_path, sizeof saved_path, "%s/adapter_model.safetensors", adapter);
    hg_st_file *saved = NULL;
    CHECK_OK(hg_st_open(&saved, saved_path));
    double e_final = 0;
    int n_final = 0;
    for (int i = 0; saved && i < hg_st_count(saved); i++) {
        const hg_st_tensor *t = hg_st_at(saved, i);
        char key[300];
        snprintf(key, sizeof key, "final.%s", t->name);
        const hg_st_tensor *w = hg_st_find(ref, key);
        CHECK(w != NULL);
        if (!w) continue;
        e_final = fmax(e_final, rel((const float *)t->data, w));
        n_final++;
    }
    int n_ref = 0;
    for (int i = 0; i < hg_st_count(ref); i++) n_ref += !strncmp(hg_st_at(ref, i)->name, "final.", 6);
    printf("%s: logits %.2e, losses of %d steps within %.2e (first %.6f, last %.6f), %d final adapters within %.2e\n",
           name, e_logits, STEPS, e_loss, want[0], want[STEPS - 1], n_final, e_final);
    /* fp32 against float64: 1.8e-6 to 9.5e-6 of the largest logit measured (2026-11-28) */
    CHECK(e_logits <= 2e-5 && e_loss <= 1e-4 && e_final <= 1e-4 && n_final == n_ref && n_final > 0);
    hg_st_close(saved);
    hg_model_free(m);

    /* the saved folder loads back, bit for bit */
    hg_model *back = adapted(name, B, T, adapter);
    if (back) {
        char again[600];
        snprintf(again, sizeof again, "%s/%s_again", tmp_root, name);
        CHECK_OK(hg_peft_save(back, again, name));
        char p1[700], p2[700];
        snprintf(p1, sizeof p1, "%s/adapter_model.safetensors", adapter);
        snprintf(p2, sizeof p2, "%s/adapter_model.safetensors", again);
        hg_st_file *f1 = NULL, *f2 = NULL;
        CHECK_OK(hg_st_open(&f1, p1));
        CHECK_OK(hg_st_open(&f2, p2));
        for (int i = 0; f1 && f2 && i < hg_st_count(f1); i++) {
            const hg_st_tensor *x = hg_st_at(f1, i), *y = hg_st_find(f2, x->name);
            CHECK(y && y->numel == x->numel && !memcmp(x->data, y->data, (size_t)x->numel * 4));
        }
        hg_st_close(f1), hg_st_close(f2);
        hg_model_free(back);
    }

    /* merged: the adapter as loaded, folded in, exported */
    snprintf(adapter, sizeof adapter, FIXTURES "/peft_%s", name);
    hg_model *mm = adapted(name, B, T, adapter);
    if (mm) {
        char out[600], wpath[700];
        snprintf(out, sizeof out, "%s/%s_merged", tmp_root, name);
        CHECK_OK(hg_lora_merge(mm));
        hg_hf_export how = {0};
        CHECK_OK(hg_model_save_hf_as(mm, NULL, out, &how));
        snprintf(wpath, sizeof wpath, "%s/model.safetensors", out);
        hg_st_file *w = NULL;
        CHECK_OK(hg_st_open(&w, wpath));
        double e = 0;
        int n = 0;
        for (int i = 0; w && i < hg_st_count(ref); i++) {
            const hg_st_tensor *r = hg_st_at(ref, i);
            if (strncmp(r->name, "merged.", 7)) continue;
            const hg_st_tensor *t = hg_st_find(w, r->name + 7);
            CHECK(t && t->dtype == HG_ST_F32 && t->numel == r->numel);
            if (t) e = fmax(e, rel((const float *)t->data, r)), n++;
        }
        printf("%s: merged and exported, %d adapted weights within %.2e of PEFT's merge_and_unload\n", name, n, e);
        CHECK(n > 0 && e <= 1e-6);
        hg_st_close(w);
        hg_model_free(mm);
    }
    hg_st_close(ref);
}

/* An adapter_config.json image refused, the message naming `want`. */
static void refused(const char *text, const char *want) {
    hg_peft_config pc;
    hg_status s = hg_peft_config_parse("adapter_config.json", text, strlen(text), &pc);
    if (s == HG_OK || !strstr(hg_last_error(), want)) {
        fprintf(stderr, "adapter_config.json %s: %s '%s', want a refusal naming '%s'\n", text, hg_status_name(s),
                hg_last_error(), want);
        check_failures++;
    }
}

static void bad_input(void) {
    const char *good = "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}";
    hg_peft_config pc;
    CHECK_OK(hg_peft_config_parse("adapter_config.json", good, strlen(good), &pc));
    CHECK(pc.lora.r == 4 && pc.lora.alpha == 8.0f && !strcmp(pc.targets, "q_proj"));
    refused("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"use_dora\": true}",
            "use_dora");
    refused("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"rank_pattern\": "
            "{\"q_proj\": 8}}", "rank_pattern");
    refused("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"modules_to_save\": "
            "[\"lm_head\"]}", "modules_to_save");
    refused("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"bias\": \"all\"}",
            "bias");
    refused("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"], \"frobnicate\": 1}",
            "frobnicate");
    refused("{\"peft_type\": \"IA3\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", "peft_type");
    refused("{\"peft_type\": \"LORA\", \"r\": 0, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", "r must");
    refused("{\"peft_type\": \"LORA\", \"r\": 1e300, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}", "r must");
    refused("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"lora_dropout\": 1.5, \"target_modules\": [\"q_proj\"]}", "lora_dropout");
    refused("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": \".*proj\"}", "target_modules");
    refused("[1, 2]", "not a JSON object");
    /* a module the class does not have; a layer no target names */
    hg_config cfg;
    CHECK_OK(hg_hf_config_load(FIXTURES "/hf_llama/config.json", &cfg));
    hg_lora l = {.r = 4, .alpha = 8};
    CHECK_FAILS(hg_hf_lora_targets(&cfg, "LlamaForCausalLM", "q_proj,qkv_proj", &l), HG_ERR_INVALID, "qkv_proj");
    CHECK_OK(hg_hf_lora_targets(&cfg, "LlamaForCausalLM", "q_proj,v_proj", &l));
    CHECK(l.split[0] == 3 && l.targets[0] == 5 && !l.targets[1] && !l.targets[2] && !l.targets[3]);
    CHECK_FAILS(hg_hf_lora_targets(&cfg, NULL, "c_attn", &l), HG_ERR_INVALID, "c_attn"); /* GPT-2's name, not Llama's */
    /* an adapter of another rank is refused by file and tensor, and changes nothing */
    hg_peft_config pl;
    CHECK_OK(hg_peft_config_load(FIXTURES "/peft_llama", &pl));
    CHECK_OK(hg_hf_lora_targets(&cfg, "LlamaForCausalLM", pl.targets, &pl.lora));
    pl.lora.r = 8;
    hg_options o = hg_options_default();
    o.batch = 1, o.seq_len = 8, o.lora = pl.lora;
    hg_model *m = NULL;
    CHECK_OK(hg_model_load_hf(&m, FIXTURES "/hf_llama", &o));
    if (m) {
        hg_param_info p;
        CHECK_OK(hg_param_find(m, "h.0.attn.c_attn.lora_A.0", &p));
        float first = p.data[0];
        CHECK_FAILS(hg_peft_load(m, FIXTURES "/peft_llama"), HG_ERR_FORMAT, "adapter_model.safetensors: tensor");
        CHECK(p.data[0] == first);
        hg_model_free(m);
    }
}

int main(void) {
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    const char *names[] = {"llama", "qwen2", "gemma", "phi3"};
    for (int i = 0; i < 4; i++) against_peft(names[i]);
    bad_input();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    CHECK_DONE();
}
