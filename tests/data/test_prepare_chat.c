/* hg_prepare_chat against transformers: chat records rendered with six families' real
 * templates and encoded must give the ids apply_chat_template gives, and the loss mask
 * the assistant messages' spans give by the tokenizer's own offsets
 * (tests/fixtures/chat_prepare.json, from tools/make_chat_prepare_fixture.py); then
 * --train-on last and all, a record with nothing to train, and bad records, each named
 * by file, line and field, with no shard left behind. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "handgrad_data.h"

static char dir[] = "/tmp/hg_chat_XXXXXX";
static hg_tokenizer *tok;

static void put(const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* tokenizer_config.json with the family's template, bos and eos (NULL: absent). */
static void put_config(const char *family, const char *bos, const char *eos) {
    char p[512];
    snprintf(p, sizeof p, "fixtures/chat_templates/%s.jinja", family);
    char *t = check_slurp(p);
    CHECK(t != NULL);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "chat_template", t ? t : "");
    if (bos) cJSON_AddStringToObject(c, "bos_token", bos);
    if (eos) cJSON_AddStringToObject(c, "eos_token", eos);
    char *s = cJSON_Print(c);
    put("tokenizer_config.json", s);
    free(s), free(t);
    cJSON_Delete(c);
}

/* The one train shard the run wrote: its tokens and flags (2-byte ids: V < 65536). */
typedef struct shard {
    int32_t *ids;
    uint8_t *flags;
    size_t n;
} shard;

static int read_shard(shard *out) {
    char p[512];
    snprintf(p, sizeof p, "%s/out/train_000000.bin", dir);
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    uint8_t h[64];
    int ok = fread(h, 1, 64, f) == 64 && h[12] == 2 && h[36] == 1;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)h[16 + i] << (8 * i);
    out->n = (size_t)n;
    out->ids = malloc(sizeof *out->ids * (n + 1));
    out->flags = malloc(n + 1);
    for (size_t i = 0; ok && i < n; i++) {
        uint8_t b[2];
        ok = fread(b, 1, 2, f) == 2;
        out->ids[i] = b[0] | b[1] << 8;
    }
    ok = ok && fread(out->flags, 1, n, f) == n && fgetc(f) == EOF;
    fclose(f);
    return ok;
}

static const char *date_string; /* the next run's --date-string */

static hg_status run(hg_train_on on, hg_prepare_stats *st) {
    char in[512], out[512], cfg[512];
    snprintf(in, sizeof in, "%s/records.jsonl", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    hg_prepare_options o = hg_prepare_options_default();
    o.out_dir = out, o.val_fraction = 0, o.threads = 1;
    hg_chat_options co = {.config = cfg, .train_on = on, .date_string = date_string};
    const char *inputs[1] = {in};
    return hg_prepare_chat(tok, inputs, 1, &o, &co, st);
}

static int shard_exists(void) {
    char p[512];
    snprintf(p, sizeof p, "%s/out/train_000000.bin", dir);
    return access(p, F_OK) == 0;
}

/* Each family's records against transformers' ids and mask, then --train-on last and
 * all on the same records. */
static void against_transformers(void) {
    char *text = check_slurp("fixtures/chat_prepare.json");
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    CHECK(root != NULL);
    const cJSON *c;
    int families = 0, records = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const cJSON *bos = cJSON_GetObjectItem(c, "bos_token"), *eos = cJSON_GetObjectItem(c, "eos_token");
        put_config(cJSON_GetObjectItem(c, "family")->valuestring, cJSON_IsString(bos) ? bos->valuestring : NULL,
                   cJSON_IsString(eos) ? eos->valuestring : NULL);
        size_t cap = 1 << 16, len = 0;
        char *jsonl = malloc(cap);
        jsonl[0] = 0;
        const cJSON *r;
        cJSON_ArrayForEach(r, cJSON_GetObjectItem(c, "records")) {
            char *line = cJSON_PrintUnformatted(cJSON_GetObjectItem(r, "record"));
            len += (size_t)snprintf(jsonl + len, cap - len, "%s\n%s", line, records % 2 ? "\n" : ""); /* blank lines are skipped */
            free(line);
        }
        put("records.jsonl", jsonl);
        free(jsonl);
        for (int on = 0; on < 3; on++) {
            hg_prepare_stats st;
            CHECK_OK(run((hg_train_on)on, &st));
            shard sh = {0};
            CHECK(read_shard(&sh));
            size_t at = 0;
            int k = 0;
            cJSON_ArrayForEach(r, cJSON_GetObjectItem(c, "records")) {
                const cJSON *ids = cJSON_GetObjectItem(r, "ids"), *train = cJSON_GetObjectItem(r, "train");
                const int n = cJSON_GetArraySize(ids), msgs = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "record"), "messages") != NULL;
                CHECK(at + (size_t)n <= sh.n);
                if (at + (size_t)n > sh.n) break;
                int bad_ids = 0, bad_train = 0, last_run = n; /* where the final run of trained tokens starts */
                for (int i = n - 1; i > 0 && !cJSON_GetArrayItem(train, i)->valueint; i--) last_run = i;
                for (int i = last_run - 1; i > 0 && cJSON_GetArrayItem(train, i)->valueint; i--) last_run = i;
                for (int i = 0; i < n; i++) {
                    const int want_train = on == HG_TRAIN_ON_ALL ? i > 0
                                         : on == HG_TRAIN_ON_LAST && msgs ? i >= last_run && cJSON_GetArrayItem(train, i)->valueint
                                         : cJSON_GetArrayItem(train, i)->valueint;
                    bad_ids += sh.ids[at + i] != cJSON_GetArrayItem(ids, i)->valueint;
                    bad_train += !!(sh.flags[at + i] & HG_TOKEN_TRAIN) != want_train;
                    bad_train += !!(sh.flags[at + i] & HG_TOKEN_DOC) != (i == 0);
                }
                if (bad_ids || bad_train)
                    fprintf(stderr, "%s record %d (train-on %d): %d ids and %d flags differ from transformers'\n",
                            cJSON_GetObjectItem(c, "family")->valuestring, k, on, bad_ids, bad_train);
                CHECK(bad_ids == 0 && bad_train == 0);
                at += (size_t)n, k++;
                records += on == 0;
            }
            CHECK(at == sh.n && st.documents == (uint64_t)k && st.untrained == 0 && st.train_tokens == sh.n);
            free(sh.ids), free(sh.flags);
        }
        families++;
    }
    printf("prepare --chat: %d records of %d families equal transformers' ids and loss mask\n", records, families);
    CHECK(families == 6 && records >= 12);
    cJSON_Delete(root);
    free(text);
}

/* Refusals name the file, the line and the field, and leave no shard; a record with
 * nothing to train is counted. */
static void bad_records(void) {
    put_config("gemma2", "<bos>", "<eos>");
    static const char *const good = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                                    "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n";
    static const struct {
        const char *line, *want1, *want2;
    } cases[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", \"content\": \"b\"}]}",
         "messages[1].role", "\"tool\""},
        {"[1, 2]", "not a JSON object", NULL},
        {"{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content", NULL},
        {"{\"messages\": []}", "messages: empty", NULL},
        {"{\"prompt\": \"p\"}", "completion", NULL},
        {"{\"text\": \"x\"}", "neither \"messages\"", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\"", "not valid JSON", NULL},
        {"{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"a\"}]}",
         "chat_template: line", "System role not supported"},
        {"{\"prompt\": \"p\", \"completion\": \"c\"}", "eos_token", "<eos>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s\n%s", good, cases[i].line, good);
        put("records.jsonl", text);
        hg_prepare_stats st;
        hg_status s = run(HG_TRAIN_ON_ASSISTANT, &st);
        const char *e = hg_last_error();
        int named = s != HG_OK && strstr(e, "records.jsonl: line 2: ") && strstr(e, cases[i].want1) &&
                    (!cases[i].want2 || strstr(e, cases[i].want2));
        if (!named) fprintf(stderr, "bad record %zu: status %d, \"%s\"\n", i, (int)s, e);
        CHECK(named);
        CHECK(!shard_exists());
    }
    /* a user turn alone trains nothing: left out and counted */
    char text[1024];
    snprintf(text, sizeof text, "%s{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n%s", good, good);
    put("records.jsonl", text);
    hg_prepare_stats st;
    CHECK_OK(run(HG_TRAIN_ON_ASSISTANT, &st));
    CHECK(st.documents == 2 && st.untrained == 1 && st.targets > 0);
    put("records.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n");
    CHECK(run(HG_TRAIN_ON_ASSISTANT, &st) == HG_ERR_INVALID && strstr(hg_last_error(), "no record with a trained token"));
    /* a config without chat_template cannot render messages */
    put("tokenizer_config.json", "{\"eos_token\": \"<|eot_id|>\"}");
    put("records.jsonl", good);
    CHECK(run(HG_TRAIN_ON_ASSISTANT, &st) == HG_ERR_FORMAT && strstr(hg_last_error(), "has no chat_template"));
    put("records.jsonl", "{\"prompt\": \"p\", \"completion\": \"c\"}\n"); /* which prompt/completion does not need */
    CHECK_OK(run(HG_TRAIN_ON_ASSISTANT, &st));
}

/* Llama 3.2's template prints the date: date_string fixes it, so the shards do not
 * depend on the day they were made. */
static void dated(void) {
    put_config("llama3.2", "<|begin_of_text|>", "<|eot_id|>");
    put("records.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, "
                         "{\"role\": \"assistant\", \"content\": \"b\"}]}\n");
    date_string = "26 Jul 2024";
    hg_prepare_stats st;
    CHECK_OK(run(HG_TRAIN_ON_ASSISTANT, &st));
    date_string = NULL;
    shard sh = {0};
    CHECK(read_shard(&sh));
    char text[4096];
    size_t n = 0;
    CHECK_OK(hg_tokenizer_decode(tok, sh.ids, sh.n, text, sizeof text - 1, &n));
    text[n < sizeof text - 1 ? n : sizeof text - 1] = 0;
    CHECK(strstr(text, "Today Date: 26 Jul 2024") != NULL);
    free(sh.ids), free(sh.flags);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    CHECK_OK(hg_tokenizer_load(&tok, "fixtures/hf_llama/tokenizer.json"));
    if (tok) {
        against_transformers();
        dated();
        bad_records();
    }
    hg_tokenizer_free(tok);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_DONE();
}
